"""Where Apptainer keeps its image cache and temporary files: never $HOME unless asked.

``resolve_cache_dir`` is the one place the cache directory is decided: a pure decision over
the resolved settings, the environment passed in and an injected ``exists``. ``ensure_dirs``
is the small function that touches the filesystem (free space: ``ctrain.util.fs``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ctrain.errors import ConfigError
from ctrain.settings_table import Settings
from ctrain.util import fs, locks

RUNTIME_CACHE_ENVS = ("APPTAINER_CACHEDIR", "SINGULARITY_CACHEDIR")
SCRATCH_ENVS = ("SCRATCH", "WORK")
HOME_DEFAULT = Path(".apptainer") / "cache"
"""Apptainer's own default, relative to $HOME: only with --allow-home-cache."""
NO_CACHE_FIX = "set CTRAIN_CACHE_DIR to a directory on scratch, or pass --allow-home-cache"
IN_USE_LOCK = "in-use.lock"
"""Shared-locked by every pull and build while it uses the cache (``cache clean`` checks it)."""
TOOL_TMP_PREFIX = "ctrain-apptainer-"
"""A pull's or build's own directory in the temporary space: Apptainer's build-temp-* go there,
and it is removed when ctrain's step ends, since Apptainer may leave them when stopped."""


@dataclass(frozen=True)
class CacheChoice:
    path: Path
    source: str  # "flag", "env CTRAIN_CACHE_DIR", "file PATH:LINE", "scratch $SCRATCH", ...
    under_home: bool


def _value(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def is_under(path: Path, home: str | None) -> bool:
    """Whether ``path`` is ``home`` or inside it, comparing resolved paths (HOME=/ never counts)."""
    if not home:
        return False
    root = Path(home).resolve(strict=False)
    if root == Path(root.anchor):
        return False
    return path.resolve(strict=False).is_relative_to(root)


def _configured(settings: Settings) -> tuple[Path, str] | None:
    """The ``cache_dir`` setting and its source, when someone set it (blank counts as unset)."""
    text = (settings.cache_dir or "").strip()
    return (Path(text), settings.sources["cache_dir"]) if text else None


class _Candidate(NamedTuple):
    shown: str  # how the error's list of what was tried names it
    path: Path | None  # None: its variable is unset (``shown`` says so)
    needs: Path | None  # what must exist: the path itself, or its parent
    source: str  # CacheChoice.source when it is chosen


def _first_usable(
    candidates: Iterable[_Candidate],
    home: str | None,
    exists: Callable[[Path], bool],
    tried: list[str],
) -> tuple[Path, str] | None:
    """The first candidate whose ``needs`` exists and that is outside $HOME, with its source;
    each one passed over goes to ``tried``, with why."""
    for candidate in candidates:
        path, needs = candidate.path, candidate.needs
        if path is None or needs is None:
            tried.append(candidate.shown)
        elif not exists(needs):
            missing = "does not exist" if needs == path else f"{needs} does not exist"
            tried.append(f"{candidate.shown} ({missing})")
        elif is_under(path, home):
            tried.append(f"{candidate.shown} (under $HOME)")
        else:
            return path, candidate.source
    return None


def _runtime_env(environ: Mapping[str, str]) -> list[_Candidate]:
    """APPTAINER_CACHEDIR (or SINGULARITY_CACHEDIR) where set: used when it exists."""
    candidates = []
    for name in RUNTIME_CACHE_ENVS:
        value = _value(environ, name)
        if value is not None:
            path = Path(value)
            candidates.append(_Candidate(f"{name}={value}", path, path, f"env {name}"))
    return candidates


def _scratch(environ: Mapping[str, str]) -> list[_Candidate]:
    """$SCRATCH/ctrain, $WORK/ctrain, /scratch/$USER/ctrain: used when the parent exists."""
    user = _value(environ, "USER") or _value(environ, "LOGNAME")
    parents = [(f"${name}", name, _value(environ, name)) for name in SCRATCH_ENVS]
    parents.append(("/scratch/$USER", "USER", f"/scratch/{user}" if user else None))
    candidates = []
    for label, variable, parent in parents:
        if parent is None:
            candidates.append(_Candidate(f"{label}/ctrain ({variable} unset)", None, None, ""))
        else:
            path = Path(parent) / "ctrain"
            candidates.append(_Candidate(str(path), path, Path(parent), f"scratch {label}"))
    return candidates


def resolve_cache_dir(
    settings: Settings,
    environ: Mapping[str, str],
    exists: Callable[[Path], bool] = Path.exists,
    *,
    accept_home: bool = False,
) -> CacheChoice:
    """The cache directory and its true source, the one precedence every caller uses:
    the ``cache_dir`` setting (``--cache-dir`` > CTRAIN_CACHE_DIR > ./ctrain.toml > the user
    config, as ``s`` resolved it) > an existing APPTAINER_CACHEDIR (or SINGULARITY_CACHEDIR)
    outside $HOME > $SCRATCH/ctrain, $WORK/ctrain, /scratch/$USER/ctrain (the first whose parent
    exists and is outside $HOME) > $HOME/.apptainer/cache when the ``allow_home_cache`` setting
    or ``accept_home`` (a caller that stores only a few bytes there) allows it; otherwise a
    ConfigError listing what was tried."""
    home = _value(environ, "HOME")
    tried: list[str] = []
    chosen = _configured(settings) or _first_usable(
        [*_runtime_env(environ), *_scratch(environ)], home, exists, tried
    )
    if chosen is not None:
        return CacheChoice(chosen[0], chosen[1], is_under(chosen[0], home))
    allow_home = accept_home or settings.allow_home_cache
    if allow_home and home:
        path = Path(home) / HOME_DEFAULT
        return CacheChoice(path, "$HOME default", is_under(path, home))
    why = "HOME unset" if allow_home else "needs --allow-home-cache"
    tried.append(f"$HOME/.apptainer/cache ({why})")
    raise ConfigError(
        "no directory for the Apptainer cache outside $HOME; tried: " + "; ".join(tried),
        NO_CACHE_FIX,
    )


def apptainer_env(choice: CacheChoice) -> dict[str, str]:
    """The cache variable for Apptainer and for SingularityCE (the temporary space is
    ``tmpdir_env``'s, on the node)."""
    cache = str(choice.path)
    return {"APPTAINER_CACHEDIR": cache, "SINGULARITY_CACHEDIR": cache}


ENROOT_DIR = "enroot"
"""enroot's own directories for ``enroot import`` run by ctrain, in the cache: CACHE/enroot/."""


def enroot_env(choice: CacheChoice, tmpdir: Path) -> dict[str, str]:
    """enroot's paths for an ``enroot import`` ctrain runs: its layer cache (and registry
    tokens), data and runtime directories under CACHE/enroot/ (enroot creates all three on
    start, by default under $HOME or /run), its temporary space ``tmpdir`` (node-local)."""
    root = choice.path / ENROOT_DIR
    return {
        "ENROOT_CACHE_PATH": str(root / "cache"),
        "ENROOT_DATA_PATH": str(root / "data"),
        "ENROOT_RUNTIME_PATH": str(root / "runtime"),
        "ENROOT_TEMP_PATH": str(tmpdir),
    }


def build_tmpdir(settings: Settings, environ: Mapping[str, str]) -> Path:
    """Where ``apptainer pull`` and ``build`` unpack layers and make squashfs (their
    ``build-temp-*``): the ``build_tmpdir`` setting, else the node-local $TMPDIR, else /tmp;
    never the cache's (often parallel) filesystem by default, where fakeroot builds fail."""
    given = (settings.build_tmpdir or "").strip()
    return Path(given) if given else node_local_tmp(environ)


def node_local_tmp(environ: Mapping[str, str]) -> Path:
    """$TMPDIR (Slurm's per-job directory on the node), else /tmp."""
    return Path(_value(environ, "TMPDIR") or "/tmp")


def tmpdir_env(tmpdir: Path) -> dict[str, str]:
    """``tmpdir`` for Apptainer and for SingularityCE (the same value: no mismatch warning)."""
    return {"APPTAINER_TMPDIR": str(tmpdir), "SINGULARITY_TMPDIR": str(tmpdir)}


def check_tmpdir(tmpdir: Path, min_free_gb: int) -> None:
    """The build temporary directory exists and has ``min_free_gb`` GiB free."""
    fix = "create it, or choose another with --tmpdir (CTRAIN_BUILD_TMPDIR)"
    if not tmpdir.is_dir():
        raise ConfigError(f"temporary directory {tmpdir} does not exist", fix)
    fs.check_free(tmpdir, min_free_gb, fix)


def ensure_dirs(choice: CacheChoice) -> None:
    """Create the cache directory, mode 0700; an existing directory keeps its mode."""
    path = choice.path
    if path.is_dir():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
        path.chmod(0o700)  # mkdir's mode is filtered by the umask
    except FileExistsError:
        if not path.is_dir():
            raise ConfigError(f"{path} exists and is not a directory", NO_CACHE_FIX) from None
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror}", NO_CACHE_FIX) from exc


def in_use_lock(root: Path) -> Path:
    return root / IN_USE_LOCK


@contextlib.contextmanager
def in_use(choice: CacheChoice) -> Iterator[None]:
    """Hold a shared ``flock`` on ``CACHE/in-use.lock`` while a pull or build uses the cache:
    ``cache clean`` sees it held (``locks.is_held``) and leaves work in progress alone."""
    path = in_use_lock(choice.path)
    try:
        choice.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = locks.open_lock(path)
    except OSError as exc:
        raise ConfigError(f"cannot create {path}: {exc.strerror}", NO_CACHE_FIX) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
