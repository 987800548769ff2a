"""``ctrain pull --runtime charliecloud``: an image directory in the cache, ``CACHE/charliecloud/``.

Two sources, unpacked by Charliecloud's own ``ch-convert`` (found beside ``ch-run``):

- ``docker-daemon://NAME:TAG`` (a local Docker daemon's image): the export of a container
  created from it (through the engine's API, ``images.docker_api``) into an uncompressed
  tarball in the temporary space, ``ch-convert -i tar``, then ``ch/environment`` from the
  image's ``ENV``. This is what ``ch-convert -i docker`` does,
  without the gzip of the whole image it makes in between (5 of its 8 minutes for the 2.7 GB
  CPU image on 2 busy cores);
- ``docker://REPO:TAG`` (a registry): ``ch-image pull`` into ``CACHE/charliecloud/storage``, then
  ``ch-convert -i ch-image``. ch-image 0.31 speaks HTTPS only: a plain-HTTP registry cannot
  serve it (push the image to the Docker daemon and use ``docker-daemon://``).

The directory is written under ``.<name>.pull-<token>`` beside the target and renamed into
place, under ``flock(<target>.lock)``: concurrent pulls of one image wait for the first, then
reuse it. A record ``<target>.json`` (``images.sif``'s sidecar) is written after the rename and
removed before a replacement; a target whose record names the same reference is reused with
nothing converted. The tarball and ch-convert's own temporary space are node-local
(``cachedir.build_tmpdir``). A pull killed at any moment leaves the previous image and record
as they were; the next pull removes its leftovers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ctrain.container.charliecloud import ENV_FILE
from ctrain.errors import ConfigError, ExternalToolError
from ctrain.images import cachedir
from ctrain.images.pull import TEMP_TAG, PullPlan, PullResult, pull_lock, safe_name
from ctrain.images.sif import Sidecar, lock_of, new_sidecar, read_sidecar, sidecar_of
from ctrain.names import CHARLIECLOUD, split_reference
from ctrain.util import fs, proc

CH_DIR = "charliecloud"  # image directories in the cache
STORAGE = "storage"  # ch-image's storage directory, under CH_DIR
CONVERT_TIMEOUT = None  # a large image on a busy node takes as long as it takes
SOURCES = {
    "docker-daemon": "docker",
    "docker": "ch-image",
}  # scheme -> its store, as ch-convert names it


def source_of(ref: str) -> tuple[str, str]:
    """``(ch-convert input format, reference without its scheme)``, or a ConfigError."""
    split = split_reference(ref.strip())
    if split is None or split[0] not in SOURCES or not split[1]:
        raise ConfigError(
            f"{CHARLIECLOUD} cannot pull {ref!r}",
            "use docker-daemon://NAME:TAG (the Docker daemon's image) or docker://REPO:TAG",
        )
    return SOURCES[split[0]], split[1]


def plan_pull(
    ref: str, program: str, output: str | None, cache_root: Path, force: bool
) -> PullPlan:
    """Where the image directory goes: ``CACHE/charliecloud/<name>``; ``program`` is ch-run."""
    if output is not None:
        raise ConfigError(
            f"-o/--output: {CHARLIECLOUD} images go to the cache (CACHE/{CH_DIR}/NAME)",
            "drop -o; choose the cache with --cache-dir (CTRAIN_CACHE_DIR)",
        )
    fmt, name = source_of(ref)
    checked = f"{'docker-daemon' if fmt == 'docker' else 'docker'}://{name}"
    target = cache_root / CH_DIR / safe_name(checked)
    record = sidecar_of(target)
    return PullPlan(checked, CHARLIECLOUD, program, target, record, lock_of(target), True, force)


def convert_argv(program: str, fmt: str, source: str, temp: Path, tmpdir: Path) -> list[str]:
    """ch-convert (beside ch-run ``program``) from ``source`` into the directory ``temp``."""
    tool = str(Path(program).with_name("ch-convert"))
    return [tool, "--no-clobber", "--tmp", str(tmpdir), "-i", fmt, "-o", "dir", source, str(temp)]


def env_file_text(env: Sequence[str]) -> str:
    """``ch/environment``: the image's ``ENV`` items (``NAME=VALUE``), one a line."""
    return "".join(f"{item}\n" for item in env)


def fetch_argv(program: str, ref: str) -> list[str] | None:
    """``ch-image pull`` for a registry reference; None when ch-convert reads the source."""
    fmt, name = source_of(ref)
    return [str(Path(program).with_name("ch-image")), "pull", name] if fmt == "ch-image" else None


def storage_env(target: Path) -> dict[str, str]:
    """ch-image's storage directory (read by ch-image and by ch-convert -i ch-image)."""
    return {"CH_IMAGE_STORAGE": str(target.parent / STORAGE)}


def is_recorded(sidecar: Sidecar | None, plan: PullPlan, is_dir: bool) -> bool:
    """Whether the record says ``plan``'s target is this reference's whole directory."""
    return (
        is_dir
        and sidecar is not None
        and sidecar.ref == plan.ref
        and sidecar.target == str(plan.target)
    )


def recorded(plan: PullPlan) -> bool:
    assert plan.target is not None
    return is_recorded(read_sidecar(plan.record), plan, plan.target.is_dir())


def pull(
    plan: PullPlan,
    cache: cachedir.CacheChoice,
    environ: Mapping[str, str],
    min_free_gb: int,
    say: Callable[[str], None],
    *,
    tmpdir: Path | None = None,
) -> PullResult:
    """Pull ``plan`` (the image directory), or reuse it when recorded; progress to ``say``."""
    target = plan.target
    assert target is not None
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with pull_lock(plan, str(target), environ, say):
        temp_space = tmpdir or cachedir.node_local_tmp(environ)
        prefix = fs.temp_prefix(target, TEMP_TAG)  # the directory beside it, the tarball there
        for leftover in [
            *fs.remove_leftovers(target.parent, prefix),
            *fs.remove_leftovers(temp_space, prefix),
        ]:
            say(f"removed {leftover}, left by an interrupted pull")
        sidecar = read_sidecar(plan.record)
        if not plan.force and sidecar is not None and is_recorded(sidecar, plan, target.is_dir()):
            return PullResult(str(target), False, sidecar, "up to date")
        fs.check_free(target.parent, min_free_gb)
        cachedir.check_tmpdir(temp_space, min_free_gb)
        reason = "--force" if plan.force else "not present" if sidecar is None else "replaced"
        say(f"converting {plan.ref} into {target} with ch-convert ({reason})")
        with cachedir.in_use(cache):
            _convert(plan, target, {**environ, **storage_env(target)}, temp_space)
        # Recorded while the lock is held: a pull waiting on it then finds the record.
        new = new_sidecar(plan.ref, CHARLIECLOUD, None, target=str(target))
        fs.write_text(plan.record, new.to_json())
    return PullResult(str(target), True, new, reason)


def _convert(plan: PullPlan, target: Path, env: Mapping[str, str], tmpdir: Path) -> None:
    """Fetch and convert into a temporary directory, then rename it over ``target``."""
    temp = fs.temp_beside(target, TEMP_TAG)
    old = fs.temp_beside(target, TEMP_TAG)  # the previous image, moved aside for the rename
    untouched = "the previous image is untouched"
    fix = f"check the reference and that the image exists; {untouched}"
    try:
        fmt, name = source_of(plan.ref)
        fetch = fetch_argv(plan.program, plan.ref)
        if fetch is None:
            _from_docker(plan.program, name, temp, env, tmpdir, fix)
        else:
            proc.check(fetch, env, CONVERT_TIMEOUT, what=f"ch-image pull {plan.ref}", fix=fix)
            argv = convert_argv(plan.program, fmt, name, temp, tmpdir)
            proc.check(argv, env, CONVERT_TIMEOUT, what=f"ch-convert of {plan.ref}", fix=fix)
        if not (temp / "bin").exists():
            raise ExternalToolError(f"ch-convert wrote no image into {temp}", fix)
        plan.record.unlink(missing_ok=True)  # no record ever describes a directory it is not
        os.utime(temp)  # its age in the cache (cache clean) is the pull's, not the image's
        if target.exists():
            os.rename(target, old)
        os.rename(temp, target)
        fs.fsync_dir(target.parent)
    except OSError as exc:
        raise fs.write_error(exc, target, "free some space, or choose another --cache-dir") from exc
    finally:
        fs.remove(temp)
        fs.remove(old)


def _from_docker(
    program: str, name: str, temp: Path, env: Mapping[str, str], tmpdir: Path, fix: str
) -> None:
    """The Docker daemon's image ``name`` into the directory ``temp`` (see the module doc)."""
    from ctrain.images import docker_api

    tar = tmpdir / f"{temp.name}.tar"  # ch-convert reads an uncompressed *.tar
    try:
        image_env = docker_api.export_image(docker_api.connect(env), name, tar, env)
        argv = convert_argv(program, "tar", str(tar), temp, tmpdir)
        proc.check(argv, env, CONVERT_TIMEOUT, what=f"ch-convert of {name}", fix=fix)
    finally:
        fs.remove(tar)
    (temp / ENV_FILE).parent.mkdir(exist_ok=True)
    (temp / ENV_FILE).write_text(env_file_text(image_env), encoding="utf-8")
