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
place by the pull steps every store shares (images.stores.base): concurrent pulls of one image wait
for the first, then reuse it; its record ``<target>.json`` (``images.record``'s sidecar) is written
under the lock after the rename and removed before a replacement; a target whose record names
the same reference is reused with nothing converted. The tarball and ch-convert's own temporary
space are node-local (``cachedir.build_tmpdir``); the leftovers of an interrupted pull are
removed from both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from ctrain.errors import ConfigError, ExternalToolError, PullError
from ctrain.images import cachedir
from ctrain.images.record import CH_DIR, Action, Sidecar, new_sidecar, read_sidecar
from ctrain.images.stores.base import UNTOUCHED, FileStore, PullAsk, Pulling, PullPlan
from ctrain.names import CH_ENV_FILE, CHARLIECLOUD
from ctrain.references import safe_name, split_reference
from ctrain.util import fs, proc

STORAGE = "storage"  # ch-image's storage directory, under CH_DIR
CONVERT_TIMEOUT = None  # a large image on a busy node takes as long as it takes
SOURCES = {
    "docker-daemon": "docker",
    "docker": "ch-image",
}  # scheme -> its store, as ch-convert names it
SCHEMES = {fmt: scheme for scheme, fmt in SOURCES.items()}  # the inverse: store -> scheme


def source_of(ref: str) -> tuple[str, str]:
    """``(ch-convert input format, reference without its scheme)``, or a ConfigError."""
    split = split_reference(ref.strip())
    if split is None or split[0] not in SOURCES or not split[1]:
        raise ConfigError(
            f"{CHARLIECLOUD} cannot pull {ref!r}",
            "use docker-daemon://NAME:TAG (the Docker daemon's image) or docker://REPO:TAG",
        )
    return SOURCES[split[0]], split[1]


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


class CharliecloudStore(FileStore):
    space_fix = "free some space, or choose another --cache-dir"
    flush = False  # thousands of files, not flushed one by one: the rename is what is atomic

    def plan(self, asked: PullAsk) -> PullPlan:
        """Where the image directory goes: ``CACHE/charliecloud/<name>``; the program is
        ch-run."""
        if asked.output is not None:
            raise ConfigError(
                f"-o/--output: {CHARLIECLOUD} images go to the cache (CACHE/{CH_DIR}/NAME)",
                "drop -o; choose the cache with --cache-dir (CTRAIN_CACHE_DIR)",
            )
        fmt, name = source_of(asked.ref)
        checked = f"{SCHEMES[fmt]}://{name}"
        target = asked.cache_root / CH_DIR / safe_name(checked)
        return PullPlan.beside(asked, checked, target, runtime=CHARLIECLOUD)

    def pull_env(self, plan: PullPlan, cache: cachedir.CacheChoice, tmpdir: Path) -> dict[str, str]:
        return storage_env(plan.target) if plan.target is not None else {}

    def decision(self, plan: PullPlan, target: Path) -> tuple[Sidecar | None, Action, str]:
        sidecar = read_sidecar(plan.record)
        if plan.force:
            return sidecar, "pull", "--force"
        if is_recorded(sidecar, plan, target.is_dir()):
            return sidecar, "reuse", "up to date"
        return sidecar, "pull", "not present" if sidecar is None else "replaced"

    def starting(self, plan: PullPlan, target: Path, reason: str) -> str:
        return f"converting {plan.ref} into {target} with ch-convert ({reason})"

    def swept(self, target: Path, temp_space: Path) -> tuple[Path, ...]:
        return (target.parent, temp_space)  # the directory beside it, the tarball there

    def fetch(self, plan: PullPlan, temp: Path, run: Pulling, temp_space: Path) -> None:
        """Fetch and convert into the directory ``temp``."""
        assert plan.target is not None  # planned by this store
        env = {**run.environ, **storage_env(plan.target)}
        fix = f"check the reference and that the image exists; {UNTOUCHED}"
        fmt, name = source_of(plan.ref)
        fetch = fetch_argv(plan.program, plan.ref)
        if fetch is None:
            _from_docker(plan.program, name, temp, env, temp_space, fix)
        else:
            try:
                proc.check(fetch, env, CONVERT_TIMEOUT, what=f"ch-image pull {plan.ref}", fix=fix)
            except ExternalToolError as exc:  # the registry refused it, or could not be reached
                raise PullError(exc.message, exc.fix) from exc
            argv = convert_argv(plan.program, fmt, name, temp, temp_space)
            proc.check(argv, env, CONVERT_TIMEOUT, what=f"ch-convert of {plan.ref}", fix=fix)
        if not (temp / "bin").exists():
            raise ExternalToolError(f"ch-convert wrote no image into {temp}", fix)
        os.utime(temp)  # its age in the cache (cache clean) is the pull's, not the image's

    def record(self, plan: PullPlan, target: Path, size: int | None) -> Sidecar:
        return new_sidecar(plan.ref, CHARLIECLOUD, None, target=str(target))


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
    (temp / CH_ENV_FILE).parent.mkdir(exist_ok=True)
    (temp / CH_ENV_FILE).write_text(env_file_text(image_env), encoding="utf-8")
