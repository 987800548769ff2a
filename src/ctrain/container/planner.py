"""From settings to one complete runtime invocation, and running it in place of ctrain.

``plan`` decides everything the exec will get, the Apptainer cache variables included, so
``--dry-run`` prints exactly what ``run`` execs; ``run`` only creates and checks the cache
directory and takes the overlay lock before it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from ctrain.container import versions
from ctrain.container.runtimes import Invocation, Request, plan_invocation
from ctrain.container.spec import Action
from ctrain.images import cachedir
from ctrain.launch.jobenv import GpuEnv
from ctrain.names import SIF_RUNTIMES
from ctrain.settings import Resolved
from ctrain.util import fs, proc


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
    workdir = s["cwd"].value
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
        workdir=str(workdir) if workdir else None,
        user=(os.getuid(), os.getgid()),
        tty=action == "shell" and sys.stdin.isatty(),
        python=sys.executable,
    )
    gpus = GpuEnv.from_environ(environ).visible
    extra = tuple(binds) if isinstance(binds, tuple) else ()
    invocation = plan_invocation(
        request,
        environ,
        lambda name: proc.which(name, environ),
        gpus,
        extra,
        version_of=lambda program: versions.installed_version(program, environ),
    )
    return _with_apptainer_cache(invocation, s, environ)


def _with_apptainer_cache(
    invocation: Invocation, s: Mapping[str, Resolved], environ: Mapping[str, str]
) -> Invocation:
    """A remote image is pulled implicitly by apptainer: its cache and tmp go where ctrain's
    settings say, and the invocation carries those variables (and the directory to prepare)."""
    if invocation.runtime not in SIF_RUNTIMES:
        return invocation
    if Path(invocation.spec.image).is_file():
        return invocation
    choice = cachedir.resolve_cache_dir(s, environ)
    added = cachedir.apptainer_env(choice)
    return dataclasses.replace(
        invocation, env={**invocation.env, **added}, runtime_env=added, cache=choice
    )


def _hold_overlay_lock(
    invocation: Invocation, s: Mapping[str, Resolved], environ: Mapping[str, str]
) -> None:
    """An overlay is locked as Apptainer locks it (read for ``:ro``, write for read-write), for
    the life of the container process (the fd survives the exec)."""
    overlay = invocation.spec.overlay
    if overlay is None:
        return
    from ctrain.images import overlay as overlays

    overlays.lock_overlay(Path(overlay.path), overlay.readonly)


def run(invocation: Invocation, s: Mapping[str, Resolved], environ: Mapping[str, str]) -> NoReturn:
    """Create and check the cache directory, take the overlay lock, then exec the invocation."""
    if invocation.cache is not None:
        cachedir.ensure_dirs(invocation.cache)
        fs.check_free(invocation.cache.path, int(str(s["min_free_gb"].value)))
    _hold_overlay_lock(invocation, s, environ)
    proc.exec_replace(invocation.argv, invocation.env)
