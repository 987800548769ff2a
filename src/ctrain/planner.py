"""From settings to one complete runtime invocation, and running it in place of ctrain.

``plan`` decides everything the exec will get, the image included: a remote image on apptainer
or singularity is run from the local SIF file ``ctrain pull`` writes (``images.resolve``), so
``--dry-run`` prints what ``run`` execs. When that file is not there yet, the plan names the
pull; ``run`` pulls, plans again (now on the file), takes the overlay lock, then execs.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple, NoReturn

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


class Planned(NamedTuple):
    invocation: Invocation  # what is exec'd (planned again after a pending pull)
    image: resolve.ImageChoice  # the pull to run before it, if any
    request: Request  # what was asked, the image as given: planned again from it after the pull


def plan(
    action: Action,
    *,
    image: str | None,
    command: tuple[str, ...],
    bind_flags: tuple[str, ...],
    env_pairs: tuple[str, ...],
    settings: Settings,
    environ: Mapping[str, str],
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
        env_pairs=env_pairs,
        env_files=(settings.env_file,) if settings.env_file else (),
        cwd=os.getcwd(),
        workdir=settings.cwd or None,
        user=(os.getuid(), os.getgid()),
        tty=action == "shell" and sys.stdin.isatty(),
        python=sys.executable,
        image_python=settings.image_python or None,
        fuse=os.access(FUSE_DEVICE, os.R_OK | os.W_OK),
        carried=carried_launcher(),
    )
    return plan_request(request, settings, environ)


def plan_request(request: Request, settings: Settings, environ: Mapping[str, str]) -> Planned:
    """The invocation for ``request``: its runtime chosen, its image resolved (``images.resolve``),
    its command line checked."""
    gpus = GpuEnv.from_environ(environ).visible

    def which(name: str) -> str | None:
        return proc.which(name, environ)

    runtime, program = choose_runtime(request.runtime, which)
    choice = resolve.choose(request.image, runtime.name, program, settings, environ)
    resolved = request
    if choice.pull is None:  # else the file is not there yet: planned again after the pull
        resolved = request._replace(image=choice.image)
    invocation = plan_invocation(
        resolved,
        environ,
        which,
        gpus,
        settings.binds,
        version_of=lambda program: releases.installed_version(program, environ),
    )
    return Planned(invocation=invocation, image=choice, request=request)


def carried_launcher() -> carry.Carried:
    """This ctrain and its command line's own dependency, as installed here."""
    spec = importlib.util.find_spec("click")
    deps = [("click", spec.origin)] if spec is not None and spec.origin else []
    return carry.of_modules(ctrain.__file__, deps)


def _hold_overlay_lock(invocation: Invocation) -> None:
    """An overlay is locked as Apptainer locks it (read for ``:ro``, write for read-write), for
    the life of the container process (the fd survives the exec)."""
    overlay = invocation.spec.overlay
    if overlay is None:
        return
    from ctrain.images import overlay as overlays

    overlays.lock_overlay(Path(overlay.path), overlay.readonly)


def pulled(
    planned: Planned,
    settings: Settings,
    environ: Mapping[str, str],
    say: Callable[[str], None],
) -> Planned:
    """``planned`` with its pending pull done, if it has one: the pull runs, then the request is
    planned again (now on the pulled file, which the exec runs)."""
    if planned.image.pull is None:
        return planned
    resolve.fetch(planned.image, environ, settings.min_free_gb, say)
    return plan_request(planned.request, settings, environ)


def run(
    planned: Planned,
    settings: Settings,
    environ: Mapping[str, str],
    say: Callable[[str], None],
) -> NoReturn:
    """Pull the image if the plan says so (``pulled``), take the overlay lock, then exec the
    invocation."""
    invocation = pulled(planned, settings, environ, say).invocation
    _hold_overlay_lock(invocation)
    proc.exec_replace(invocation.argv, invocation.env)
