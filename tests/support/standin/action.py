"""exec, run and shell (facts: "exec / run / shell"): the image resolved (a remote one through
the network and the cache), binds and overlays checked, the command RUN on the host in the
container's environment and working directory, signals forwarded, its status returned."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.support.standin import remote
from tests.support.standin.cli import Flags, given, parse, values
from tests.support.standin.environment import start_script
from tests.support.standin.identity import Fatal, Identity
from tests.support.standin.log import Call
from tests.support.standin.overlay import lock_overlays, parse_overlays
from tests.support.standin.sif import Metadata, read_metadata, strings

Event = Callable[[dict[str, object]], None]
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)  # fmt: skip


def parse_binds(specs: list[str], cwd: Path) -> list[dict[str, object]]:
    binds: list[dict[str, object]] = []
    for spec in specs:
        for one in re.split(r"(?<!\\),", spec):
            parts = re.split(r"(?<!\\):", one)
            src = Path(parts[0].replace("\\,", ",").replace("\\:", ":"))
            src = src if src.is_absolute() else cwd / src
            if not src.exists():
                raise Fatal(f"container creation failed: mount {src}: no such file or directory")
            dst = parts[1] if len(parts) > 1 else str(src)
            opts = parts[2:] or ["rw"]
            if any(opt not in ("ro", "rw") and "=" not in opt for opt in opts):
                raise Fatal(f"bind option {opts} is not valid in {one!r}")
            binds.append({"src": str(src), "dst": dst, "readonly": "ro" in opts})
    return binds


def mount_script(binds: list[dict[str, object]], scratch: str) -> list[str]:
    """Real bind mounts for the binds a host process cannot see (destination differs, or
    read-only), to run inside ``unshare --mount``; refused loudly where that cannot be done.

    A destination the host lacks is made as Apptainer's underlay makes it in an image: the
    nearest directory above it that exists gets an overlay whose upper layer is a tmpfs mounted
    on ``scratch`` in the namespace (so nothing is written to the host), and the destination is
    made in it. Not under / itself: the stand-in refuses a destination whose first directory the
    host lacks."""
    needed = [b for b in binds if b["dst"] != b["src"] or b["readonly"]]
    if not needed:
        return []
    if os.geteuid() != 0:
        raise Fatal(f"stand-in: binds {needed} need a mount namespace, which needs root")
    lines = [f"/usr/bin/mount -t tmpfs tmpfs {shlex.quote(scratch)} || exit 255"]
    layered: list[str] = []
    for bind in needed:
        src, dst = str(bind["src"]), str(bind["dst"])
        if not Path(dst).exists():
            anchor = next(p for p in Path(dst).parents if p.is_dir())
            if anchor == Path("/"):  # a mount on / is not seen by the process whose root it is
                raise Fatal(f"stand-in: bind destination {dst} does not exist on this host")
            if str(anchor) not in layered:
                top = f"{scratch}/{len(layered)}"
                opts = f"lowerdir={anchor},upperdir={top}/up,workdir={top}/work"
                lines.append(f"mkdir -p {top}/up {top}/work || exit 255")
                lines.append(f"/usr/bin/mount -t overlay overlay -o {shlex.quote(opts)} "
                             f"{shlex.quote(str(anchor))} || exit 255")  # fmt: skip
                layered.append(str(anchor))
            lines.append(f"mkdir -p {shlex.quote(dst)} || exit 255")
        lines.append(f"/usr/bin/mount --bind {shlex.quote(src)} {shlex.quote(dst)} || exit 255")
        if bind["readonly"]:
            lines.append(f"/usr/bin/mount -o remount,bind,ro {shlex.quote(dst)} || exit 255")
    return lines


def working_dir(flags: Flags, environ: dict[str, str]) -> str:
    """--cwd: a failed chdir is fatal; otherwise the host's cwd, falling back to $HOME."""
    given_cwd = values(flags, "--cwd", "--pwd")
    if given_cwd:
        if not Path(given_cwd[-1]).is_dir():
            raise Fatal(f"could not set working directory {given_cwd[-1]}: no such directory")
        return given_cwd[-1]
    try:
        return os.getcwd()
    except FileNotFoundError:
        home = environ.get("HOME", "/")
        print(f"WARNING: could not use the current directory, using {home}", file=sys.stderr)
        return home


def image_metadata(
    image: str, who: Identity, environ: dict[str, str], flags: Flags, event: Event
) -> Metadata:
    if remote.is_uri(image):
        from tests.support.standin.images import cached_image  # not at the top: start-up time

        remote.check_reference(image, "exec")
        disable = given(flags, "--disable-cache") or who.enabled(environ, "DISABLE_CACHE")
        return cached_image(image, who, environ, disable, event, given(flags, "--no-https"))[1]
    path = Path(image)
    if not path.exists():
        raise Fatal(f"could not open image {image}: no such file or directory")
    return {} if path.is_dir() else read_metadata(path)


def command_of(verb: str, rest: list[str], flags: Flags, metadata: Metadata) -> list[str]:
    if verb == "exec":
        return rest[1:]
    if verb == "shell":
        if len(rest) > 1:
            print(f"WARNING: shell ignores its extra arguments {rest[1:]}", file=sys.stderr)
        return [(values(flags, "--shell", "-s") or ["/bin/sh"])[-1]]
    entrypoint, cmd = strings(metadata, "entrypoint"), strings(metadata, "cmd")
    return [*entrypoint, *(rest[1:] or cmd)] or ["/bin/sh"]


def action(verb: str, args: list[str], environ: dict[str, str], who: Identity, call: Call) -> int:
    flags, rest = parse(verb, args, who)
    container: dict[str, object] = {"image": rest[0]}
    call.line["container"] = container  # logged even when a check below is fatal
    metadata = image_metadata(rest[0], who, environ, flags, call.event)
    command = command_of(verb, rest, flags, metadata)
    bind_specs = values(flags, "--bind", "-B")
    bind_specs += [v for v in (who.setting(environ, k) for k in ("BIND", "BINDPATH")) if v]
    overlay_specs = values(flags, "--overlay", "-o")
    overlay_specs += [v for v in [who.setting(environ, "OVERLAY")] if v]
    cwd = working_dir(flags, environ)
    binds = parse_binds(bind_specs, Path(cwd))
    overlays = parse_overlays(overlay_specs, given(flags, "--writable-tmpfs"))
    nv = given(flags, "--nv")
    container.update(command=command, cwd=cwd, binds=binds, overlays=overlays, nv=nv)
    held = lock_overlays(overlays)
    base, script = start_script(who, environ, flags, metadata, rest[0])
    scratch = tempfile.mkdtemp(prefix="standin-underlay-")  # a mount point, left empty
    mounts = mount_script(binds, scratch)
    argv = ["/bin/sh", "-c", script, "sh", *command]
    if mounts:
        wrapper = "\n".join([*mounts, 'exec /bin/sh -c "$0" "$@"'])
        argv = ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", wrapper,
                script, "sh", *command]  # fmt: skip
    try:
        status = run(argv, base, cwd, container, call)
    finally:
        os.rmdir(scratch)
    for fd in held:
        os.close(fd)
    return status


def run(argv: list[str], env: dict[str, str], cwd: str, container: dict[str, object],
        call: Call) -> int:  # fmt: skip
    """Start the command, log what it got, forward signals, return its status (-N when signal N
    killed it: the caller dies of N too)."""
    children: list[subprocess.Popen[bytes]] = []

    def forward(number: int, _frame: object) -> None:
        if not children:  # before the command started: as if it had died of it
            raise SystemExit(128 + number)
        children[0].send_signal(number)

    for number in FORWARDED:
        signal.signal(number, forward)
    read_end, write_end = os.pipe()
    # Python's own descriptors are not inherited (PEP 446): the child gets 0-2 and the pipe as 3
    child = subprocess.Popen(argv, env=env, cwd=cwd, close_fds=False,
                             preexec_fn=lambda: os.dup2(write_end, 3))  # fmt: skip
    children.append(child)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as dump:
        got = dump.read()
    if got:
        pairs = (item.partition("=") for item in got.decode(errors="replace").split("\0") if item)
        container["env"] = {key: value for key, _, value in pairs}
        call.write()
    status = child.wait()
    if not got:
        raise Fatal("container creation failed: the environment script did not run")
    return status
