"""Container runtimes behind one interface, and the plan of one ``ctrain exec/run/shell``.

``plan_invocation`` is pure apart from reading --env-file files, checking that paths exist and
asking the runtime its version (``version_of``): it returns the exact argv and environment; the
CLI prints them (``describe``, for --dry-run) or execs them.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from ctrain.container import carry
from ctrain.container.spec import (
    Action,
    Bind,
    RunSpec,
    check_paths,
    container_env,
    job_tmpdir,
    parse_bind,
    parse_overlay,
    pmix_server_dir,
    refuse_shared_rw_overlay,
)
from ctrain.errors import ExternalToolError, SpecError
from ctrain.names import (
    AUTO,
    CHARLIECLOUD,
    CONTAINER_RUNTIMES,
    HOST,
    PYXIS,
    SIF_RUNTIMES,
    program_of,
)
from ctrain.releases import RuntimeVersion
from ctrain.util.envpairs import parse_env_file, parse_env_pair
from ctrain.util.secrets import masked


class Runtime(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def carries_launcher(self) -> bool:
        """``ctrain exec`` carries ctrain's launcher into the image (container/carry.py)."""
        ...

    def argv(self, spec: RunSpec, program: str) -> list[str]: ...

    def process_env(self, spec: RunSpec, environ: Mapping[str, str]) -> dict[str, str]: ...

    def image_file(self, image: str) -> str | None: ...

    def probed(self, program: str, version_of: Callable[[str], RuntimeVersion]) -> Runtime: ...

    def notes(self, spec: RunSpec) -> list[str]: ...


# runtime -> its adapter's module under ctrain.container and class, imported when chosen: an exec
# loads one adapter, not six (a few milliseconds each at start-up)
ADAPTERS: dict[str, tuple[str, str]] = {
    **{name: ("apptainer", "Apptainer") for name in SIF_RUNTIMES},
    "docker": ("docker", "Docker"),
    "podman": ("podman", "Podman"),
    CHARLIECLOUD: ("charliecloud", "Charliecloud"),
    PYXIS: ("pyxis", "Pyxis"),
    HOST: ("host", "Host"),
}


@functools.cache
def runtime_named(name: str) -> Runtime:
    """The adapter of runtime ``name`` (one of ADAPTERS), made once."""
    module, cls = ADAPTERS[name]
    adapter: Runtime = getattr(importlib.import_module(f"ctrain.container.{module}"), cls)(name)
    return adapter


def choose_runtime(requested: str, which: Callable[[str], str | None]) -> tuple[Runtime, str]:
    """The runtime and the path of its program; auto tries CONTAINER_RUNTIMES in order."""
    if requested == HOST:
        return runtime_named(HOST), ""
    names = CONTAINER_RUNTIMES if requested == AUTO else (requested,)
    for name in names:
        program = which(program_of(name))
        if program:
            return runtime_named(name), program
    wanted = ", ".join(program_of(name) for name in names)
    raise ExternalToolError(
        f"no container runtime found on PATH (looked for {wanted})",
        "load the site's apptainer module, or use the current environment: --runtime host",
    )


class Request(NamedTuple):
    runtime: str
    action: Action
    image: str
    command: tuple[str, ...]
    launch: bool = True
    explain: bool = False  # ctrain launch --explain: the plan, the interpreter, nothing run
    nv: bool = False
    binds: tuple[str, ...] = ()
    overlay: str | None = None
    env_pairs: tuple[str, ...] = ()
    env_files: tuple[str, ...] = ()
    cwd: str = "/"  # where ctrain runs
    workdir: str | None = None  # the working directory asked for in the container (--cwd)
    user: tuple[int, int] | None = None
    tty: bool = False
    python: str = "python3"  # the interpreter that runs ctrain on the host runtime
    image_python: str | None = None  # the image's that runs the carried launcher (else its rule)
    carried: carry.Carried | None = None  # the launcher carried into the image, where it can be
    fuse: bool = True  # the caller may open /dev/fuse


class Invocation(NamedTuple):
    runtime: str
    argv: list[str]
    env: dict[str, str]  # the runtime process's whole environment
    added: dict[str, str]  # what ctrain adds for the container (shown by --dry-run)
    spec: RunSpec
    notes: tuple[str, ...] = ()  # the runtime's choices, for --dry-run
    carriers: frozenset[str] = frozenset()  # what carries `added` in env: APPTAINERENV_X, ...


def describe(invocation: Invocation, environ: Mapping[str, str], reveal: bool = False) -> list[str]:
    """What --dry-run prints: the argv, the runtime's choices, the container's variables, then
    every other variable the runtime process gets that the host does not have; carriers like
    APPTAINERENV_NAME are shown once, as ``env NAME``. Secrets are hidden unless ``reveal``
    (``util.secrets``)."""
    import shlex

    def shown(key: str, value: str) -> str:
        return shlex.quote(value if reveal else masked(key, value))

    lines = [shlex.join(invocation.argv)]
    lines += [f"  note {note}" for note in invocation.notes]
    lines += [f"  env {k}={shown(k, v)}" for k, v in sorted(invocation.added.items())]
    for key, value in sorted(invocation.env.items()):
        if environ.get(key) != value and key not in invocation.carriers:
            lines.append(f"  runtime env {key}={shown(key, value)}")
    return lines


def _asked_env(request: Request) -> dict[str, str]:
    asked: dict[str, str] = {}
    for name in request.env_files:
        try:
            text = Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            raise SpecError(
                f"cannot read --env-file {name}: {exc.strerror}", "fix the path"
            ) from exc
        asked.update(parse_env_file(text, name))
    for pair in request.env_pairs:
        key, value = parse_env_pair(pair)
        asked[key] = value
    return asked


def _command(request: Request, runtime: Runtime) -> tuple[str, ...]:
    if request.action != "exec":
        return request.command
    if not request.command:
        raise SpecError("no command given", "put it after --: ctrain exec IMAGE -- python train.py")
    if not request.launch:
        if request.explain:
            raise SpecError(
                "--explain asks ctrain launch for its plan, and --no-launch runs none",
                "drop one of them",
            )
        return request.command
    explain = ("--explain",) if request.explain else ()
    if runtime.name == HOST:
        return (request.python, "-m", "ctrain", "launch", *explain, "--", *request.command)
    if _carries(request, runtime):
        return carry.command(request.command, request.image_python, request.explain)
    return ("ctrain", "launch", *explain, "--", *request.command)


def _carries(request: Request, runtime: Runtime) -> bool:
    """The launcher is carried into the container for this exec."""
    return (
        request.carried is not None
        and request.action == "exec"
        and request.launch
        and runtime.carries_launcher
    )


def plan_invocation(
    request: Request,
    environ: Mapping[str, str],
    which: Callable[[str], str | None],
    gpus: tuple[str, ...] | None,
    extra_binds: Sequence[str] = (),
    *,
    version_of: Callable[[str], RuntimeVersion],
) -> Invocation:
    """The exact command and environment for one exec, run or shell, checked before launch."""
    runtime, program = choose_runtime(request.runtime, which)
    binds = tuple(parse_bind(text) for text in (*extra_binds, *request.binds))
    carried = request.carried if _carries(request, runtime) else None
    if carried is not None:
        binds = (*binds, *carry.binds(carried))
    tmpdir = job_tmpdir(environ) if runtime.name != HOST else None
    if tmpdir is not None and not any(bind.dst == tmpdir for bind in binds):
        binds = (Bind(tmpdir, tmpdir), *binds)
    # Apptainer makes the mount point; charliecloud's read-only image would need it already.
    pmix = pmix_server_dir(environ) if runtime.name in SIF_RUNTIMES else None
    if pmix is not None and not any(bind.dst == pmix for bind in binds):
        binds = (*binds, Bind(pmix, pmix))
    overlay = parse_overlay(request.overlay) if request.overlay else None
    refuse_shared_rw_overlay(overlay, environ)
    image = request.image
    if runtime.name != HOST and not image:
        raise SpecError("no image given", "name one (ctrain exec IMAGE -- ...) or set CTRAIN_IMAGE")
    check_paths(binds, overlay, runtime.image_file(image) if image else None)
    added = container_env(environ, _asked_env(request), tmpdir)
    spec = RunSpec(
        image=image,
        action=request.action,
        command=_command(request, runtime),
        nv=request.nv,
        gpus=gpus,
        binds=binds,
        overlay=overlay,
        env=added,
        cwd=request.cwd,
        workdir=request.workdir,
        user=request.user,
        tty=request.tty,
        fuse=request.fuse,
    )
    runtime = runtime.probed(program, version_of)  # once the request is known to be sound
    argv = runtime.argv(spec, program)
    env = runtime.process_env(spec, environ)
    notes, carriers = tuple(runtime.notes(spec)), frozenset(runtime.process_env(spec, {}))
    if carried is not None:
        notes += (carry.note(carried),)
    return Invocation(runtime.name, argv, env, added, spec, notes=notes, carriers=carriers)
