"""``ctrain build``: an image from a recipe, with the cache kept out of $HOME and no partial
target ever in place (apptainer builds go to a temporary name in the target's directory, are
checked, then renamed)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ctrain.container.spec import parse_env_pair
from ctrain.errors import ExternalToolError, SpecError
from ctrain.images import cachedir
from ctrain.images.sif import check_sif
from ctrain.names import ENGINE_RUNTIMES, is_remote
from ctrain.util import fs, proc


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


def build(
    request: BuildRequest,
    environ: Mapping[str, str],
    cache: cachedir.CacheChoice | None,
    min_free_gb: int,
) -> None:
    """Run the build, streaming its output to stderr; the target appears whole or not at all."""
    check_request(request)
    env = dict(environ)
    if cache is not None:
        cachedir.ensure_dirs(cache)
        fs.check_free(cache.path, min_free_gb)
        env.update(cachedir.apptainer_env(cache))
    if request.runtime in ENGINE_RUNTIMES:
        _run(engine_build_argv(request), env, request.runtime)
        return
    target = Path(request.target)
    fs.check_free(target.parent, min_free_gb)
    with fs.atomic(target, fs.temp_beside(target, "build")) as temp:
        _run(sif_build_argv(request, temp), env, request.runtime)
        problem = check_sif(temp)
        if problem is not None:
            raise ExternalToolError(f"the built image is not usable: {problem}", "build it again")


def _run(argv: list[str], env: Mapping[str, str], runtime: str) -> None:
    code = proc.stream(argv, env, lambda line: print(line, end="", file=sys.stderr))
    if code != 0:
        raise ExternalToolError(f"{runtime} build exited {code}", "read the build output above")


def default_target(recipe: str, runtime: str) -> str:
    stem = Path(recipe.split("://")[-1]).name.split(":")[0].removesuffix(".def") or "image"
    return stem if runtime in ENGINE_RUNTIMES else f"{stem}.sif"
