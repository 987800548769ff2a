"""``ctrain build``: an image from a recipe, with the cache kept out of $HOME and no partial
target ever in place (apptainer builds go to a temporary name in the target's directory, are
checked, then renamed)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ctrain.container.spec import parse_env_pair
from ctrain.errors import CtrainError, ExternalToolError, SpecError
from ctrain.images import cachedir
from ctrain.images.pull import check_sif
from ctrain.util import proc

REMOTE = ("docker://", "docker-daemon://", "docker-archive://", "oras://", "library://")


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


def temp_target(target: Path) -> Path:
    return target.with_name(f".{target.name}.build-{os.getpid()}")


def build_argv(request: BuildRequest) -> list[str]:
    """The build command (the SIF goes to ``temp_target``)."""
    if request.runtime in ("docker", "podman"):
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
    fakeroot = ["--fakeroot"] if request.fakeroot else []
    temp = temp_target(Path(request.target))
    return [request.program, "build", *fakeroot, *_args(request), str(temp), request.recipe]


def check_request(request: BuildRequest) -> None:
    """Refuse, before anything is written, what cannot work."""
    if not request.recipe.startswith(REMOTE) and not Path(request.recipe).is_file():
        raise SpecError(f"recipe {request.recipe} does not exist", "give a .def file or Dockerfile")
    _args(request)
    if request.runtime in ("docker", "podman"):
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
        cachedir.check_free(cache.path, min_free_gb)
        env.update(cachedir.apptainer_env(cache))
    if request.runtime not in ("docker", "podman"):
        cachedir.check_free(Path(request.target).parent, min_free_gb)
    argv = build_argv(request)
    temp = temp_target(Path(request.target))
    try:
        code = proc.stream(argv, env, lambda line: print(line, end="", file=sys.stderr))
        if code != 0:
            raise ExternalToolError(
                f"{request.runtime} build exited {code}", "read the build output above"
            )
        if request.runtime in ("docker", "podman"):
            return
        problem = check_sif(temp)
        if problem is not None:
            raise ExternalToolError(f"the built image is not usable: {problem}", "build it again")
        os.replace(temp, request.target)
    except (CtrainError, KeyboardInterrupt):
        temp.unlink(missing_ok=True)
        raise


def default_target(recipe: str, runtime: str) -> str:
    stem = Path(recipe.split("://")[-1]).name.split(":")[0].removesuffix(".def") or "image"
    return stem if runtime in ("docker", "podman") else f"{stem}.sif"
