"""From settings to one complete runtime invocation, and running it in place of ctrain.

``plan`` decides everything the exec will get, the image included: a remote image on apptainer
or singularity is run from the local SIF file ``ctrain pull`` writes (``images.resolve``), so
``--dry-run`` prints what ``run`` execs. When that file is not there yet, the plan names the
pull; ``run`` pulls, plans again (now on the file), takes the overlay lock, then execs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NoReturn

import ctrain
from ctrain import releases
from ctrain.container import carry
from ctrain.container.runtimes import Invocation, Request, choose_runtime, plan_invocation
from ctrain.container.spec import Action
from ctrain.images import resolve
from ctrain.launch.jobenv import GpuEnv
from ctrain.settings_table import Settings
from ctrain.util import proc

FUSE_DEVICE = "/dev/fuse"


@dataclasses.dataclass(frozen=True)
class Planned:
    invocation: Invocation  # what is exec'd (planned again after a pending pull)
    image: resolve.ImageChoice  # the pull to run before it, if any


def plan(
    action: Action,
    image: str | None,
    command: tuple[str, ...],
    bind_flags: tuple[str, ...],
    env_pairs: tuple[str, ...],
    settings: Settings,
    environ: Mapping[str, str],
    *,
    explain: bool = False,
) -> Planned:
    """The invocation these settings and arguments ask for, checked before anything runs;
    with ``explain``, the launcher in the container prints its plan instead of running."""
    request = Request(
        runtime=settings.runtime,
        action=action,
        image=image or settings.image,
        command=command,
        launch=settings.launch,
        explain=explain,
        nv=settings.nv,
        binds=bind_flags,
        overlay=settings.overlay or None,
        env_pairs=(
            *env_pairs,
            *((f"CTRAIN_IMAGE_PYTHON={settings.image_python}",) if settings.image_python else ()),
        ),
        env_files=(settings.env_file,) if settings.env_file else (),
        cwd=os.getcwd(),
        workdir=settings.cwd or None,
        user=(os.getuid(), os.getgid()),
        tty=action == "shell" and sys.stdin.isatty(),
        python=sys.executable,
        fuse=os.access(FUSE_DEVICE, os.R_OK | os.W_OK),
        carried=carried_launcher(),
    )
    gpus = GpuEnv.from_environ(environ).visible

    def which(name: str) -> str | None:
        return proc.which(name, environ)

    runtime, program = choose_runtime(request.runtime, which)
    choice = resolve.choose(request.image, runtime.name, program, settings, environ)
    if choice.pull is None:  # else the file is not there yet: planned again after the pull
        request = dataclasses.replace(request, image=choice.image)
    invocation = plan_invocation(
        request,
        environ,
        which,
        gpus,
        settings.binds,
        version_of=lambda program: releases.installed_version(program, environ),
    )
    return Planned(invocation, choice)


def carried_launcher() -> carry.Carried:
    """This ctrain and its command line's own dependency, as installed here."""
    spec = importlib.util.find_spec("click")
    deps = [("click", spec.origin)] if spec is not None and spec.origin else []
    return carry.of_modules(ctrain.__file__, deps)


def _hold_overlay_lock(
    invocation: Invocation, settings: Settings, environ: Mapping[str, str]
) -> None:
    """An overlay is locked as Apptainer locks it (read for ``:ro``, write for read-write), for
    the life of the container process (the fd survives the exec)."""
    overlay = invocation.spec.overlay
    if overlay is None:
        return
    from ctrain.images import overlay as overlays

    overlays.lock_overlay(Path(overlay.path), overlay.readonly)


def run(
    planned: Planned,
    again: Callable[[], Planned],
    settings: Settings,
    environ: Mapping[str, str],
    say: Callable[[str], None],
) -> NoReturn:
    """Pull the image if the plan says so (then plan ``again``: the exec runs the pulled file),
    take the overlay lock, then exec the invocation."""
    if planned.image.pull is not None:
        resolve.fetch(planned.image, environ, settings.min_free_gb, say)
        planned = again()
    invocation = planned.invocation
    _hold_overlay_lock(invocation, settings, environ)
    proc.exec_replace(invocation.argv, invocation.env)
