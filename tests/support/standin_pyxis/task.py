"""Each task's side of the pyxis stand-in, run by the real srun in place of the command: the
image checked, the mounts made, the environment and working directory pyxis gives a task
(docs/pyxis-facts.md, "A task"), one log line, then the command exec'd (same pid, so srun's
signals reach it)."""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.standin.action import mount_script
from tests.support.standin.identity import Fatal

SQUASHFS_MAGIC = b"hsqs"
LOCALE = ("LANG", "LANGUAGE", "LC_ALL")  # dropped from the task unless --container-env names them


class Failed(Exception):
    """pyxis' error in slurmstepd: the task never starts."""


def check_image(image: str, cwd: str) -> None:
    """A squashfs file must be one (enroot create unpacks it); a registry image is modelled."""
    if image[0] not in "./":
        return
    path = Path(cwd, image)
    head = path.read_bytes()[:4] if path.is_file() else b""
    if head != SQUASHFS_MAGIC:
        raise Failed(f"pyxis: failed to create container filesystem for image: {image}")


def task_env(host: dict[str, str], image_env: dict[str, str], listed: list[str]) -> dict[str, str]:
    """The task's environment: the host's minus the locale, then the image's values over it,
    except for the names in --container-env that the host has."""
    env = {k: v for k, v in host.items() if k not in LOCALE or k in listed}
    for key, value in image_env.items():
        if not (key in listed and key in host):
            env[key] = value
    return env


def mount_lines(mounts: list[dict[str, Any]], scratch: str) -> list[str]:
    """Real bind mounts for what the host cannot already show (another destination, or ro). A
    destination the host lacks is made, as pyxis' default ``x-create=auto`` makes it in the
    container, in an overlay on a tmpfs on ``scratch`` (the Apptainer stand-in's underlay); the
    tmpfs is then detached and ``scratch`` removed, so nothing is left on the host."""
    binds = []
    for mount in mounts:
        src, dst, flags = str(mount["src"]), str(mount["dst"]), list(mount["flags"])
        if src[0] != "/" or dst[0] != "/":
            raise Failed(f"stand-in: relative mount paths ({src}:{dst}) are not modelled")
        if not Path(src).exists():
            raise Failed(f"pyxis: --container-mounts: source path does not exist: {src}")
        binds.append({"src": src, "dst": dst, "readonly": "ro" in flags})
    try:
        lines = mount_script(binds, scratch)
    except Fatal as exc:
        raise Failed(str(exc)) from exc
    if lines:
        lines.append(f"/usr/bin/umount -l {shlex.quote(scratch)} || exit 1")
        lines.append(f"rmdir {shlex.quote(scratch)} || exit 1")
    return lines


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    command = argv[2:]
    host = dict(os.environ)
    scratch = tempfile.mkdtemp(prefix="standin-pyxis-")  # a mount point, left empty
    try:
        check_image(str(spec["image"]), os.getcwd())
        lines = mount_lines(spec["mounts"], scratch)
        env = task_env(host, spec["image_env"], spec["env"])
        workdir = spec["workdir"] or spec["image_workdir"]
        if not lines and not Path(workdir).is_dir():
            raise Failed(f"pyxis: couldn't chdir to {workdir}: No such file or directory")
    except Failed as exc:
        os.rmdir(scratch)
        print(f"slurmstepd: error: {exc}", file=sys.stderr)
        return 1
    if not lines:
        os.rmdir(scratch)
    log = spec.get("log")
    if log:
        line = {"task": host.get("SLURM_PROCID"), "host": os.uname().nodename, "image":
                spec["image"], "mounts": spec["mounts"], "workdir": workdir, "command": command,
                "env": env}  # fmt: skip
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps(line) + "\n")
    if lines:  # unshare execs the shell, which execs the command: the pid stays the task's
        script = "\n".join([*lines, 'cd "$0" || exit 1', 'exec "$@"'])
        command = ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                   script, workdir, *command]  # fmt: skip
    else:
        os.chdir(workdir)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"slurmstepd: error: execve(): {command[0]}: {exc.strerror}", file=sys.stderr)
        return 2
