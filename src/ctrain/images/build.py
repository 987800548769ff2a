"""``ctrain build``: an image from a recipe, with the cache kept out of $HOME and no partial
target ever in place (apptainer builds go to a temporary name in the target's directory, are
checked, then renamed).

Checked before apptainer runs, because it would fail late or not at all: ``--build-arg`` and
``%arguments`` need a release that has them (``ctrain.releases``), and a
``--build-arg`` the definition never uses (``{{ NAME }}`` outside ``#`` lines) is fatal in
Apptainer. Apptainer's temporary space (``build-temp-*``) goes to the node-local
``cachedir.build_tmpdir``; a stopped build passes SIGTERM/SIGINT on and waits for apptainer
to remove it.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ctrain.errors import ExternalToolError, SpecError
from ctrain.images import cachedir
from ctrain.images.sif_header import check_sif
from ctrain.names import ENGINE_RUNTIMES
from ctrain.references import is_remote
from ctrain.releases import RuntimeVersion, installed_version, needs
from ctrain.util import fs, proc
from ctrain.util.envpairs import parse_env_pair
from ctrain.util.progress import Event, build_event

_PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass(frozen=True)
class BuildRequest:
    runtime: str  # apptainer, singularity, docker or podman
    program: str
    recipe: str  # a definition file or Dockerfile, or (apptainer) a docker:// style source
    target: str  # a .sif path, or an image tag for docker/podman
    build_args: tuple[str, ...] = ()
    context: str | None = None  # docker: the build context (default: the recipe's directory)
    fakeroot: bool = False
    force: bool = False


def _args(request: BuildRequest) -> list[str]:
    out: list[str] = []
    for pair in request.build_args:
        key, value = parse_env_pair(pair, "--build-arg")
        out += ["--build-arg", f"{key}={value}"]
    return out


def engine_build_argv(request: BuildRequest) -> list[str]:
    """``docker build`` or ``podman build``: the image goes to the engine's store."""
    context = request.context or str(Path(request.recipe).parent)
    return [
        request.program,
        "build",
        "--network",
        "host",
        "-f",
        request.recipe,
        "-t",
        request.target,
        *_args(request),
        context,
    ]


def sif_build_argv(request: BuildRequest, temp: Path) -> list[str]:
    """``apptainer build`` into ``temp``, renamed to the target once checked."""
    fakeroot = ["--fakeroot"] if request.fakeroot else []
    return [request.program, "build", *fakeroot, *_args(request), str(temp), request.recipe]


def check_request(request: BuildRequest) -> None:
    """Refuse, before anything is written, what cannot work."""
    if not is_remote(request.recipe, "build") and not Path(request.recipe).is_file():
        raise SpecError(f"recipe {request.recipe} does not exist", "give a .def file or Dockerfile")
    _args(request)
    if request.runtime in ENGINE_RUNTIMES:
        if request.target.endswith(".sif"):
            raise SpecError(
                f"{request.runtime} builds an image tag, not {request.target}",
                "give a tag (-o name:tag), or --runtime apptainer for a SIF",
            )
        return
    target = Path(request.target)
    if target.exists() and not request.force:
        raise SpecError(f"{target} exists", "pass --force to replace it")
    if not target.parent.is_dir():
        raise SpecError(f"directory {target.parent} does not exist", "create it first")


def recipe_arguments(text: str) -> tuple[set[str], bool]:
    """The ``{{ NAME }}`` a definition file uses and whether it has an ``%arguments`` section;
    lines starting with ``#`` are left alone, as Apptainer leaves them."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    used = set(_PLACEHOLDER.findall("\n".join(lines)))
    section = any(line.strip().split()[:1] == ["%arguments"] for line in lines)
    return used, section


def check_arguments(request: BuildRequest, recipe_text: str | None) -> bool:
    """Refuse a ``--build-arg`` the definition does not use (``recipe_text`` None: a remote
    source, which uses none); whether the build needs ``--build-arg`` support."""
    used, section = recipe_arguments(recipe_text) if recipe_text is not None else (set(), False)
    given = [parse_env_pair(pair, "--build-arg")[0] for pair in request.build_args]
    unused = sorted(set(given) - used)
    if unused:
        where = "a remote source" if recipe_text is None else request.recipe
        raise SpecError(
            f"--build-arg {', '.join(unused)} not used by {where} (no {{{{ {unused[0]} }}}}); "
            f"{request.runtime} build would stop on it",
            "drop it, or use it in the definition",
        )
    return bool(given) or section


def check_version(version: RuntimeVersion) -> None:
    """A SpecError when the installed release has no ``--build-arg`` (nor ``%arguments``)."""
    if not version.has("--build-arg"):
        raise SpecError(
            f"{version.text} has no --build-arg or %arguments (needs {needs('--build-arg')})",
            f"upgrade to {needs('--build-arg')}, or write the values into the definition",
        )


def build(
    request: BuildRequest,
    environ: Mapping[str, str],
    cache: cachedir.CacheChoice | None,
    min_free_gb: int,
    tmpdir: Path | None = None,
    show: Callable[[Event], None] | None = None,
) -> None:
    """Run the build; the target appears whole or not at all. A docker/podman build's steps go
    to ``show`` (its last lines to stderr if it fails; all of them without ``show``), apptainer's
    output to stderr. ``tmpdir``: apptainer's temporary space (default:
    ``cachedir.node_local_tmp``)."""
    check_request(request)
    env = dict(environ)
    if request.runtime in ENGINE_RUNTIMES:
        _run(engine_build_argv(request), env, request.runtime, request.target, show)
        return
    local = not is_remote(request.recipe, "build")
    text = Path(request.recipe).read_text(encoding="utf-8", errors="replace") if local else None
    if check_arguments(request, text):
        check_version(installed_version(request.program, env))
    if cache is not None:
        cachedir.ensure_dirs(cache)
        fs.check_free(cache.path, min_free_gb)
        env.update(cachedir.apptainer_env(cache))
    temp_space = tmpdir or cachedir.node_local_tmp(environ)
    cachedir.check_tmpdir(temp_space, min_free_gb)
    target = Path(request.target)
    fs.check_free(target.parent, min_free_gb)
    in_use = cachedir.in_use(cache) if cache is not None else contextlib.nullcontext()
    with (
        in_use,
        fs.scratch(temp_space, cachedir.TOOL_TMP_PREFIX) as scratch,
        fs.atomic(target, fs.temp_beside(target, "build")) as temp,
    ):
        env.update(cachedir.tmpdir_env(scratch))
        _run(sif_build_argv(request, temp), env, request.runtime, request.target)
        problem = check_sif(temp)
        if problem is not None:
            raise ExternalToolError(f"the built image is not usable: {problem}", "build it again")


def _run(
    argv: list[str],
    env: Mapping[str, str],
    runtime: str,
    target: str,
    show: Callable[[Event], None] | None = None,
) -> None:
    """Run a build: each output line to stderr, or with ``show`` each step to it and the last
    lines to stderr if the build fails."""

    def on_line(line: str) -> None:
        if show is None:
            print(line, end="", file=sys.stderr)
            return
        event = build_event(line)
        if event is not None:
            show(event)

    untouched, again = f"{target} was not written", "run the same build again"
    code, tail = proc.stream_to_end(
        argv, env, on_line, what="build", untouched=untouched, again=again
    )
    if code != 0:
        if show is not None:  # otherwise every line is on stderr already
            print(tail, end="", file=sys.stderr)
        raise ExternalToolError(f"{runtime} build exited {code}", "read the build output above")


def default_target(recipe: str, runtime: str) -> str:
    stem = Path(recipe.split("://")[-1]).name.split(":")[0].removesuffix(".def") or "image"
    return stem if runtime in ENGINE_RUNTIMES else f"{stem}.sif"
