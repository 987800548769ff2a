"""Podman for the real tests: its CLI with a timeout, a tiny image pushed to the local registry
(podman reaches the plain-HTTP registry through the drop-in `make services` writes), the pull
events podman logs, and ctrain run as another user on rootless podman."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

from tests.support.helpers import REGISTRY, need, registry_up
from tests.support.images import BUSYBOX, busybox_tar
from tests.support.real_runs import clean_env
from tests.support.users import user_source

TIMEOUT = 180


def podman(*args: str, check: bool = True, timeout: float = TIMEOUT) -> str:
    """``podman ARGS`` (rootful) to completion; its stdout."""
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    assert not check or done.returncode == 0, f"podman {' '.join(args)}: {done.stderr}"
    return done.stdout


def present(ref: str) -> bool:
    return (
        subprocess.run(
            ["podman", "image", "exists", ref], capture_output=True, timeout=TIMEOUT
        ).returncode
        == 0
    )


def push_busybox(name: str, tmp: Path) -> tuple[str, str]:
    """(reference, digest) of a busybox image podman pushed to the local registry under
    ``name``, then removed from its own store."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    need(BUSYBOX.is_file(), f"{BUSYBOX} missing (make system installs busybox-static)")
    ref = f"{REGISTRY}/ctrain-test/{name}:{os.getpid()}-{int(time.time())}"
    subprocess.run(
        ["podman", "import", "--change", 'CMD ["/bin/sh"]', "-", ref],
        input=busybox_tar(),
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
    )
    digest_file = tmp / "digest"
    podman("push", "--digestfile", str(digest_file), ref)
    podman("rmi", ref)
    return ref, digest_file.read_text().strip()


def pull_events(ref: str, since: float) -> list[str]:
    """The pulls of ``ref`` podman logged since ``since`` (a Unix time)."""
    out = podman(
        "events",
        "--stream=false",
        "--since",
        datetime.fromtimestamp(since, timezone.utc).isoformat().replace("+00:00", "Z"),
        "--filter",
        "type=image",
        "--filter",
        "event=pull",
        "--format",
        "{{.Name}}",
    )
    return [line for line in out.splitlines() if line.strip() == ref]


def as_user(user: str, home: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ctrain ARGS`` as ``user`` (other than root: on rootless podman), from a copy of the
    source tree (``user_source``) on Debian's own Python: the venv and the checkout may lie
    under /root, which other users cannot enter."""
    env = clean_env(HOME=home, PYTHONPATH=str(user_source()), USER=user, LOGNAME=user)
    env.pop("XDG_RUNTIME_DIR", None)  # root's; podman finds the user's own
    return subprocess.run(
        ["runuser", "-u", user, "--", "/usr/bin/python3", "-m", "ctrain", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
