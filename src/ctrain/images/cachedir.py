"""Where Apptainer keeps its image cache and temporary files: never $HOME unless asked.

``resolve_cache_dir`` is a pure decision over the environment passed in and an injected
``exists``; ``ensure_dirs`` is the small function that touches the filesystem (free space:
``ctrain.util.fs``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ctrain.errors import ConfigError

CACHE_ENV = "CTRAIN_CACHE_DIR"
RUNTIME_CACHE_ENVS = ("APPTAINER_CACHEDIR", "SINGULARITY_CACHEDIR")
SCRATCH_ENVS = ("SCRATCH", "WORK")
HOME_DEFAULT = Path(".apptainer") / "cache"
"""Apptainer's own default, relative to $HOME: only with --allow-home-cache."""
NO_CACHE_FIX = "set CTRAIN_CACHE_DIR to a directory on scratch, or pass --allow-home-cache"


@dataclass(frozen=True)
class CacheChoice:
    path: Path
    source: str  # "flag", "env CTRAIN_CACHE_DIR", "scratch $SCRATCH", "$HOME default", ...
    under_home: bool

    @property
    def tmp(self) -> Path:
        """Apptainer's build and pull temporary directory: inside the cache, same filesystem."""
        return self.path / "tmp"


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


def resolve_cache_dir(
    flag: str | None,
    environ: Mapping[str, str],
    allow_home: bool,
    exists: Callable[[Path], bool],
) -> CacheChoice:
    """The cache directory: flag > CTRAIN_CACHE_DIR > an existing APPTAINER_CACHEDIR (or
    SINGULARITY_CACHEDIR) outside $HOME > $SCRATCH/ctrain, $WORK/ctrain, /scratch/$USER/ctrain
    (the first whose parent exists and is outside $HOME) > $HOME/.apptainer/cache with
    ``allow_home``; otherwise a ConfigError listing what was tried."""
    home = _value(environ, "HOME")

    def choice(path: Path, source: str) -> CacheChoice:
        return CacheChoice(path, source, is_under(path, home))

    if flag and flag.strip():
        return choice(Path(flag.strip()), "flag")
    explicit = _value(environ, CACHE_ENV)
    if explicit:
        return choice(Path(explicit), f"env {CACHE_ENV}")

    tried: list[str] = []
    for name in RUNTIME_CACHE_ENVS:
        value = _value(environ, name)
        if value is None:
            continue
        path = Path(value)
        if not exists(path):
            tried.append(f"{name}={value} (does not exist)")
        elif is_under(path, home):
            tried.append(f"{name}={value} (under $HOME)")
        else:
            return choice(path, f"env {name}")

    user = _value(environ, "USER") or _value(environ, "LOGNAME")
    candidates = [(f"${name}", name, _value(environ, name)) for name in SCRATCH_ENVS]
    candidates.append(("/scratch/$USER", "USER", f"/scratch/{user}" if user else None))
    for label, variable, parent in candidates:
        if parent is None:
            tried.append(f"{label}/ctrain ({variable} unset)")
            continue
        path = Path(parent) / "ctrain"
        if not exists(Path(parent)):
            tried.append(f"{path} ({parent} does not exist)")
        elif is_under(path, home):
            tried.append(f"{path} (under $HOME)")
        else:
            return choice(path, f"scratch {label}")

    if allow_home and home:
        return choice(Path(home) / HOME_DEFAULT, "$HOME default")
    if allow_home:
        tried.append("$HOME/.apptainer/cache (HOME unset)")
    else:
        tried.append("$HOME/.apptainer/cache (needs --allow-home-cache)")
    raise ConfigError(
        "no directory for the Apptainer cache outside $HOME; tried: " + "; ".join(tried),
        NO_CACHE_FIX,
    )


def apptainer_env(choice: CacheChoice) -> dict[str, str]:
    """Cache and tmp variables for Apptainer and for older Singularity releases."""
    cache, tmp = str(choice.path), str(choice.tmp)
    return {
        "APPTAINER_CACHEDIR": cache,
        "APPTAINER_TMPDIR": tmp,
        "SINGULARITY_CACHEDIR": cache,
        "SINGULARITY_TMPDIR": tmp,
    }


def ensure_dirs(choice: CacheChoice) -> None:
    """Create the cache and tmp directories, mode 0700; existing directories keep their mode."""
    for path in (choice.path, choice.tmp):
        if path.is_dir():
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir(mode=0o700)
            path.chmod(0o700)  # mkdir's mode is filtered by the umask
        except FileExistsError:
            if not path.is_dir():
                raise ConfigError(f"{path} exists and is not a directory", NO_CACHE_FIX) from None
        except OSError as exc:
            raise ConfigError(f"cannot create {path}: {exc.strerror}", NO_CACHE_FIX) from exc
