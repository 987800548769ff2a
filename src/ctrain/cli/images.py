"""``ctrain pull``, ``ctrain resolve``, ``ctrain overlay create``, ``ctrain cache info|clean``.

Options stay plain strings here and are checked by the library, which each command imports
when it runs (``ctrain --help`` stays fast).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ctrain.cli._options import setting_option, settings_from
from ctrain.errors import ConfigError
from ctrain.names import DOCKER, ENGINE_RUNTIMES, HOST, SIF_RUNTIMES

if TYPE_CHECKING:
    from ctrain.images.cachedir import CacheChoice
    from ctrain.settings_table import Settings
    from ctrain.util.progress import Reporter

F = TypeVar("F", bound=Callable[..., Any])


def _say(line: str) -> None:
    click.echo(f"ctrain: {line}", err=True)


def _cache_choice(settings: Settings, small: bool = False) -> CacheChoice:
    """The cache directory; ``small`` (only kilobyte records, as for docker pulls, whose image
    lives in the engine's store) accepts $HOME without --allow-home-cache."""
    from ctrain.images import cachedir

    return cachedir.resolve_cache_dir(settings, os.environ, accept_home=small)


def _runtime(requested: str) -> tuple[str, str]:
    from ctrain.container.runtimes import choose_runtime
    from ctrain.util import proc

    runtime, program = choose_runtime(requested, lambda name: proc.which(name, os.environ))
    return runtime.name, program


def _reporter(settings: Settings, verb: str) -> Reporter:
    """Progress on stderr: a bar on a terminal, else lines (the `progress` setting)."""
    from ctrain.util import progress

    return progress.reporter(settings.progress, verb, sys.stderr, os.environ)


def _cache_options(func: F) -> F:
    func = setting_option("allow_home_cache")(func)
    return setting_option("cache_dir")(func)


@click.command()
@click.argument("ref", required=False)
@click.option(
    "-o",
    "--output",
    metavar="PATH",
    help="Where the SIF file goes (apptainer, singularity): a file, or an existing directory. "
    "[default: CACHE/images/NAME.sif]",
)
@click.option(
    "--force", is_flag=True, help="Pull even when up to date; replace a file ctrain did not pull."
)
@setting_option("runtime")
@_cache_options
@setting_option("min_free_gb")
@setting_option("build_tmpdir")
@setting_option("progress")
def pull(ref: str | None, output: str | None, force: bool, **flags: str | None) -> None:
    """Pull REF (default: the `image` setting) as a SIF file, into docker/podman's store, as a
    Charliecloud image directory (docker-daemon:// or docker://, converted by ch-convert), or
    with --runtime pyxis by `enroot import` into a squashfs file in the cache. A SIF comes from
    docker://, oras://, docker-daemon:NAME:TAG, docker-archive:FILE.tar, oci-archive:FILE.tar,
    library://, shub://, http(s)://; an archive is pulled again when the file changed.

    The file appears whole or not at all: it is downloaded (`--disable-cache`: stored once) to
    a temporary name next to the target, checked (SIF header, then `apptainer inspect`) and
    renamed; apptainer's own temporary files go to --tmpdir, node-local by default. A sidecar
    TARGET.json records the reference, digest, time and ctrain version; pulling an up-to-date
    target downloads nothing. Concurrent pulls of one target wait for each other. Docker
    pulls through the engine's API (the Docker SDK, `pip install 'ctrain-hpc[docker]'`) and shows
    its layers' progress: a bar on a terminal, one line per finished layer otherwise;
    apptainer's own output is passed through (--progress off: neither).
    """

    from ctrain.images import cachedir
    from ctrain.images import pull as pulling
    from ctrain.images.stores.base import PullAsk, Pulling

    settings = settings_from(flags)
    runtime, program = _runtime(settings.runtime)
    reference = ref if ref is not None else settings.image
    choice = _cache_choice(settings, small=runtime in ENGINE_RUNTIMES)
    plan = pulling.plan(
        PullAsk(
            ref=reference,
            runtime=runtime,
            program=program,
            output=output,
            cache_root=choice.path,
            force=force,
        )
    )
    cachedir.ensure_dirs(choice)
    min_free_gb = settings.min_free_gb
    tmpdir = cachedir.build_tmpdir(settings, os.environ)
    show = _reporter(settings, "pull")

    def echo(line: str) -> None:  # apptainer's own output, unless progress is off
        if show.board.mode != "off":
            click.echo(line, nl=False, err=True)

    try:
        result = pulling.pull(
            plan,
            Pulling(choice, os.environ, min_free_gb, _say, tmpdir=tmpdir, show=show, echo=echo),
        )
    finally:
        show.close()
    digest = f" ({result.sidecar.digest})" if result.sidecar.digest else ""
    if result.downloaded:
        click.echo(f"pulled {plan.ref} -> {result.where}{digest}")
    else:
        why = "" if result.reason == "up to date" else f" ({result.reason})"
        click.echo(
            f"up to date: {result.where}{digest}, pulled {result.sidecar.pulled_at}; "
            f"nothing downloaded{why}"
        )


@click.command()
@click.argument("image", required=False)
@setting_option("runtime")
@_cache_options
@setting_option("min_free_gb")
@setting_option("build_tmpdir")
def resolve(image: str | None, **flags: str | None) -> None:
    """Print the image to give `ctrain exec` on every rank of a job (default: the `image` setting).

    On apptainer and singularity a remote IMAGE (docker://...) is pulled as `ctrain pull` does
    (locked and recorded: an image pulled before, on a login node for instance, is reused
    without the network) and its local SIF file is printed; on charliecloud, its image
    directory. A local file, and any image on
    docker, podman or host (they pull on each node themselves, or run none), is printed as given.
    On pyxis a docker:// IMAGE is imported once with `enroot import` (as `ctrain pull --runtime
    pyxis` does) and its squashfs file printed; enroot's REGISTRY#REPO:TAG form and a squashfs
    file are printed as they are (the file by absolute path). The job scripts run it once in
    the batch step.
    """
    from ctrain.images import resolve as resolving

    settings = settings_from(flags)
    runtime, program = _runtime(settings.runtime)
    reference = image if image is not None else settings.image
    choice = resolving.choose(reference, runtime, program, settings, os.environ)
    resolving.fetch(choice, os.environ, settings.min_free_gb, _say)
    click.echo(choice.image)


@click.group()
def overlay() -> None:
    """Writable ext3 overlays for apptainer (--overlay FILE, or FILE:ro to share one)."""


@overlay.command("create")
@click.argument("path", required=False)
@click.option("--size", metavar="SIZE", help="Size: 15G, 512M, 1T (binary; a number is MiB).")
@click.option(
    "--inodes",
    metavar="N",
    help="Number of files it can hold: 500K, 2M (built with mkfs.ext3). [default: mkfs's choice]",
)
@click.option("--sparse", is_flag=True, help="Allocate blocks only as they are written.")
def overlay_create(path: str | None, size: str | None, inodes: str | None, sparse: bool) -> None:
    """Create the overlay image PATH with upper/ and work/ owned by you.

    Made by `apptainer overlay create` when apptainer is on PATH (and no --inodes), otherwise
    by mkfs.ext3. An existing PATH is never replaced.
    """
    from ctrain.images import overlay as overlays

    if path is None:
        raise ConfigError("overlay create needs a PATH", "ctrain overlay create PATH --size 15G")
    plan = overlays.plan_create(path, size, inodes, sparse, overlays.tool_finder(os.environ))
    overlays.create(plan, os.getuid(), os.getgid(), os.environ)
    click.echo(f"created {overlays.describe_overlay(plan)}")


@click.group()
def cache() -> None:
    """The image cache: where it is, what it holds, and cleaning it."""


@cache.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_cache_options
def cache_info(as_json: bool, **flags: str | None) -> None:
    """Where the cache is (and why), its size, its top-level entries and the pulled images."""
    from ctrain.images import cache as caching

    choice = _cache_choice(settings_from(flags))
    click.echo(caching.render_info(caching.info(choice), as_json))


@cache.command("clean")
@click.option(
    "--older-than",
    default="30d",
    show_default=True,
    metavar="AGE",
    help="Remove what was last modified longer ago than AGE: 30d, 12h, 2w, 90m.",
)
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@_cache_options
def cache_clean(older_than: str, dry_run: bool, **flags: str | None) -> None:
    """Remove cache entries older than --older-than (images go with their sidecars)."""
    from ctrain.images import cache as caching

    age = caching.parse_duration(older_than)
    choice = _cache_choice(settings_from(flags))
    plan = caching.plan_clean(choice.path, time.time() - age)
    problems = [] if dry_run else caching.apply_clean(choice.path, plan)
    for line in caching.render_clean(choice.path, plan, dry_run):
        click.echo(line)
    for line in problems:
        _say(line)
    if problems:
        sys.exit(1)


@click.command()
@click.argument("recipe")
@click.option(
    "-o",
    "--output",
    metavar="TARGET",
    help="A .sif path (apptainer, singularity) or an image tag (docker, podman). "
    "[default: the recipe's name]",
)
@click.option("--build-arg", "build_args", multiple=True, metavar="NAME=VALUE", help="Repeatable.")
@click.option(
    "--context", metavar="DIR", help="docker/podman build context [default: recipe's dir]"
)
@click.option("--fakeroot", is_flag=True, help="apptainer build --fakeroot (no root needed).")
@click.option("--force", is_flag=True, help="Replace an existing SIF target.")
@setting_option("runtime")
@_cache_options
@setting_option("min_free_gb")
@setting_option("build_tmpdir")
@setting_option("progress")
def build(
    recipe: str,
    output: str | None,
    build_args: tuple[str, ...],
    context: str | None,
    fakeroot: bool,
    force: bool,
    **flags: str | None,
) -> None:
    """Build an image from RECIPE: a definition file (apptainer, singularity; also docker://
    and docker-daemon:// sources) or a Dockerfile (docker, podman).

    A SIF is built under a temporary name beside the target, checked, then renamed; the
    build's cache and temporary space go to the cache directory (never $HOME by default) after
    a free-space check. A docker/podman build shows its steps (a bar on a terminal, one line
    per step otherwise; its output's end if it fails).
    """
    from ctrain.images import build as building
    from ctrain.images import cachedir

    settings = settings_from(flags)
    runtime, program = _runtime(settings.runtime)
    if runtime == HOST:
        raise ConfigError("the host runtime builds no images", "use --runtime apptainer or docker")
    request = building.BuildRequest(
        runtime=runtime,
        program=program,
        recipe=recipe,
        target=output or building.default_target(recipe, runtime),
        build_args=build_args,
        context=context,
        fakeroot=fakeroot,
        force=force,
    )
    sif = runtime in SIF_RUNTIMES
    show = None if sif else _reporter(settings, "build")
    try:
        building.build(
            request,
            os.environ,
            _cache_choice(settings) if sif else None,
            settings.min_free_gb,
            cachedir.build_tmpdir(settings, os.environ),
            show,
        )
    finally:
        if show is not None:
            show.close()
    click.echo(f"built {request.target}")


@click.command()
@click.argument("image")
@click.argument("target", required=False)
@click.option(
    "--if-present", is_flag=True, help="Push nothing, and succeed, when docker has no IMAGE."
)
@setting_option("progress")
def push(image: str, target: str | None, if_present: bool, **flags: str | None) -> None:
    """Push IMAGE from docker's store to its registry; with TARGET (REGISTRY/NAME:TAG), tag
    IMAGE as TARGET first and push that.

    Through the engine's API (the Docker SDK, `pip install 'ctrain-hpc[docker]'`), with each
    layer's progress: a bar on a terminal, one line per finished layer otherwise. Prints the
    digest the registry gave it. Docker only (with podman: podman push).
    """
    from ctrain.images import docker_api
    from ctrain.references import check_ref

    settings = settings_from(flags)
    source, dest = (check_ref(ref, DOCKER) for ref in (image, target or image))
    show = _reporter(settings, "push")
    try:
        digest = docker_api.publish(source, dest, os.environ, show)
    finally:
        show.close()
    if digest is not None:
        click.echo(f"pushed {dest} ({digest})")
    elif if_present:
        _say(f"docker has no image {image}; nothing pushed")
    else:
        raise ConfigError(
            f"docker has no image {image}",
            "build it first (make image, or ctrain build --runtime docker), "
            "or name one `docker image ls` lists",
        )
