"""From settings to one runtime invocation, and running it in place of ctrain."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from ctrain.container.runtimes import Invocation, Request, plan_invocation
from ctrain.container.spec import Action
from ctrain.images import cachedir
from ctrain.launch.jobenv import GpuEnv
from ctrain.settings import Resolved
from ctrain.util import proc


def plan(
    action: Action,
    image: str | None,
    command: tuple[str, ...],
    bind_flags: tuple[str, ...],
    env_pairs: tuple[str, ...],
    s: Mapping[str, Resolved],
    environ: Mapping[str, str],
) -> Invocation:
    """The invocation these settings and arguments ask for, checked before anything runs."""
    binds = s["binds"].value
    overlay = s["overlay"].value
    env_file = s["env_file"].value
    request = Request(
        runtime=str(s["runtime"].value),
        action=action,
        image=image or str(s["image"].value or ""),
        command=command,
        launch=bool(s["launch"].value),
        nv=bool(s["nv"].value),
        binds=bind_flags,
        overlay=str(overlay) if overlay else None,
        env_pairs=env_pairs,
        env_files=(str(env_file),) if env_file else (),
        cwd=os.getcwd(),
        user=(os.getuid(), os.getgid()),
        tty=action == "shell" and sys.stdin.isatty(),
        python=sys.executable,
    )
    gpus = GpuEnv.from_environ(environ).visible
    extra = tuple(binds) if isinstance(binds, tuple) else ()
    return plan_invocation(request, environ, lambda name: proc.which(name, environ), gpus, extra)


def _apptainer_cache(
    invocation: Invocation, s: Mapping[str, Resolved], environ: Mapping[str, str]
) -> dict[str, str]:
    """A remote image is pulled implicitly: its cache goes where ctrain's settings say."""
    if invocation.runtime not in ("apptainer", "singularity"):
        return {}
    if Path(invocation.spec.image).is_file():
        return {}
    choice = cachedir.resolve_cache_dir(s, environ)
    cachedir.ensure_dirs(choice)
    cachedir.check_free(choice.path, int(str(s["min_free_gb"].value)))
    return cachedir.apptainer_env(choice)


def _hold_overlay_lock(
    invocation: Invocation, s: Mapping[str, Resolved], environ: Mapping[str, str]
) -> None:
    """A read-write overlay is locked for the life of the container process (the fd survives
    the exec)."""
    overlay = invocation.spec.overlay
    if overlay is None or overlay.readonly:
        return
    from ctrain.images import overlay as overlays

    holder = f"pid {os.getpid()} on {socket.gethostname()}"
    job = environ.get("SLURM_JOB_ID")
    overlays.acquire_rw_lock(
        Path(overlay.path),
        holder + (f", job {job}" if job else ""),
        lock_dir=lambda: cachedir.lock_dir(s, environ),
        environ=environ,
    )


def run(invocation: Invocation, s: Mapping[str, Resolved], environ: Mapping[str, str]) -> NoReturn:
    env = {**invocation.env, **_apptainer_cache(invocation, s, environ)}
    _hold_overlay_lock(invocation, s, environ)
    proc.exec_replace(invocation.argv, env)
