"""Files that appear whole or not at all, free space, and sizes for people.

``atomic`` is the one way ctrain writes a file or directory others read: the caller fills a
temporary path beside the target (same filesystem), then it is flushed to disk, renamed into
place and the directory flushed. An exception inside the block removes the temporary path and
leaves the target as it was; a process killed outright leaves only a temporary name, which
``remove_leftovers`` clears the next time round.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from ctrain.errors import ConfigError, FileAccessError

GIB = 1024**3
FREE_FIX = (
    "free some space, or set CTRAIN_CACHE_DIR to a directory with more room "
    "(CTRAIN_MIN_FREE_GB sets the threshold)"
)


def human(size: float) -> str:
    """``1536`` -> ``1.5 KiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


# ---------------------------------------------------------------------------------------------
# Free space


def nearest_existing(path: Path) -> Path:
    """``path`` itself, or the closest of its parents that exists (the filesystem it will be on)."""
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem that holds (or will hold) ``path``."""
    found = os.statvfs(nearest_existing(path))  # as shutil.disk_usage reads it
    return found.f_bavail * found.f_frsize


def check_free(path: Path, min_gb: int, fix: str = FREE_FIX) -> int:
    """Free bytes at ``path``; a ConfigError naming the directory when under ``min_gb`` GiB."""
    free = free_bytes(path)
    if free < min_gb * GIB:
        raise ConfigError(
            f"only {human(free)} free for {path} (on {nearest_existing(path)}), "
            f"{min_gb} GiB needed",
            fix,
        )
    return free


def write_error(exc: OSError, path: Path, space_fix: str) -> FileAccessError:
    """The one-line error for a failed write of ``path`` (exit 7, as README's table says of a
    file the system refused); a full disk is told ``space_fix``."""
    if exc.errno == errno.ENOSPC:
        return FileAccessError(f"no space left in {path.parent} for {path.name}", space_fix)
    return FileAccessError(f"cannot write {path}: {exc.strerror}", "check the directory")


# ---------------------------------------------------------------------------------------------
# Atomic writes


def fsync_tree(path: Path) -> None:
    """Flush ``path`` to disk: a file, or a directory with everything in it. A filesystem that
    cannot flush a directory is not an error (the rename is still atomic)."""
    if path.is_dir() and not path.is_symlink():
        for directory, _, files in os.walk(path):
            for name in files:
                _fsync(Path(directory) / name)
            fsync_dir(Path(directory))
    else:
        _fsync(path)


def fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        _fsync(directory)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_prefix(target: Path, tag: str) -> str:
    """Temporary names for ``target`` start with ``.<name>.<tag>-``."""
    return f".{target.name}.{tag}-"


def _random() -> str:
    """8 hex digits from the OS (not secrets or tempfile: importing them costs every exec)."""
    return os.urandom(4).hex()


def temp_beside(target: Path, tag: str) -> Path:
    """``<dir>/.<name>.<tag>-<pid>-<random>``: hidden, unique, on the target's filesystem."""
    return target.with_name(f"{temp_prefix(target, tag)}{os.getpid()}-{_random()}")


def remove(path: Path) -> None:
    """Remove a file, link or directory tree; a missing path is fine."""
    if path.is_dir() and not path.is_symlink():
        import shutil  # here, as in scratch: it imports the compressors, and `ctrain exec` this

        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _unprotect(func: Callable[[str], object], path: str, _exc: object) -> None:
    """rmtree's retry for an entry in a directory without write permission (a tool's extracted
    root filesystem): make the directory writable, then try once more."""
    with contextlib.suppress(OSError):
        parent = os.path.dirname(path)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
        func(path)


@contextlib.contextmanager
def scratch(parent: Path, prefix: str) -> Iterator[Path]:
    """A new private directory under ``parent`` for another program's temporary files, removed
    with everything in it when the block ends, however it ends: a program stopped mid-way may
    leave its own (Apptainer 1.4.5's pull, stopped while it extracts layers, can)."""
    while True:
        path = parent / f"{prefix}{_random()}"
        try:
            path.mkdir(mode=0o700)
            break
        except FileExistsError:
            continue
    try:
        yield path
    finally:
        import shutil  # here: it imports the compressors, and `ctrain exec` imports this module

        shutil.rmtree(path, onerror=_unprotect)


def remove_leftovers(directory: Path, prefix: str) -> list[Path]:
    """Remove the entries of ``directory`` whose names start with ``prefix``: what killed
    writers left. Call it where no live writer can own one (under the writers' lock)."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(directory.iterdir()):
            if entry.name.startswith(prefix):
                remove(entry)
                removed.append(entry)
    return removed


def _link_new(temp: Path, target: Path) -> None:
    """Move ``temp`` to ``target`` unless ``target`` exists (FileExistsError then)."""
    try:
        os.link(temp, target)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (or a directory): check, then rename
        if target.exists() or target.is_symlink():
            raise FileExistsError(target) from None
        os.rename(temp, target)


@contextlib.contextmanager
def atomic(
    target: Path, temp: Path | None = None, *, replace: bool = True, flush: bool = True
) -> Iterator[Path]:
    """Yield a temporary path (``temp``, default ``temp_beside(target, "tmp")``) for the caller
    to create a file or directory at; when the block ends normally, flush it (unless not
    ``flush``), rename it to ``target`` and flush the directory. A directory replaces a
    directory by moving the old one aside first (``<temp>.old``, removed after). ``replace=False``
    never replaces an existing target (FileExistsError instead). On any exception the temporary
    path is removed and the target is untouched."""
    work = temp if temp is not None else temp_beside(target, "tmp")
    aside = work.with_name(work.name + ".old")
    try:
        yield work
        if flush:
            fsync_tree(work)
        if not replace:
            _link_new(work, target)
        elif work.is_dir() and target.is_dir() and not target.is_symlink():
            os.rename(target, aside)
            try:
                os.rename(work, target)
            except OSError:
                os.rename(aside, target)
                raise
        else:
            os.replace(work, target)
        fsync_dir(target.parent)
    finally:
        remove(work)
        remove(aside)


def write_text(path: Path, text: str) -> None:
    """``text`` into ``path`` (UTF-8), whole or not at all."""
    with atomic(path) as temp:
        temp.write_text(text, encoding="utf-8")
