"""flock-based locks that name their holder: the pull lock (wait for the other pull) and the
helpers the overlay lock and ``cache clean`` share.

A lock file holds one line, its current holder ("ctrain pull, pid 42 on node1, Slurm job 7"),
so whoever finds it taken can say who has it. The lock itself is the ``flock``: it goes away
with the last fd of the holder, however that process ends, so a lock file is never stale.
Lock files stay in place (removing one that is held would let a second holder in).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from ctrain.errors import ConfigError


def describe_holder(what: str, environ: Mapping[str, str]) -> str:
    """``ctrain pull, pid 42 on node1, Slurm job 7``: who holds a lock, for the others' messages."""
    text = f"{what}, pid {os.getpid()} on {socket.gethostname()}"
    job = environ.get("SLURM_JOB_ID", "").strip()
    return text + (f", Slurm job {job}" if job else "")


def read_holder(fd: int) -> str:
    """The lock file's first line: its holder, or "" when none was written yet."""
    with contextlib.suppress(OSError):
        text = os.pread(fd, 4096, 0).decode("utf-8", "replace")
        return text.split("\n", 1)[0].strip()
    return ""


def wait_for_holder(fd: int, tries: int = 50, pause: float = 0.02) -> str:
    """The holder of a lock just found taken: a new holder writes its line right after taking
    the lock, so an empty file is read again for up to ``tries * pause`` seconds."""
    for _ in range(tries):
        holder = read_holder(fd)
        if holder:
            return holder
        time.sleep(pause)
    return "another process"


def write_holder(fd: int, holder: str) -> None:
    """Record the holder in the lock file (silently skipped on a read-only lock file): the
    line is written over the old one, then the file cut to it, so a reader never finds it
    empty between holders."""
    line = (holder + "\n").encode()
    with contextlib.suppress(OSError):
        os.pwrite(fd, line, 0)
        os.ftruncate(fd, len(line))


def open_lock(path: Path) -> int:
    """An fd on the lock file ``path`` (created when missing); read-only when only that works,
    which is enough for flock."""
    flags = os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o666)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        try:
            return os.open(path, os.O_RDONLY | flags)
        except FileNotFoundError:
            raise exc from None


@contextlib.contextmanager
def hold_lock(path: Path, holder: str, on_wait: Callable[[str], None]) -> Iterator[None]:
    """Hold ``flock(LOCK_EX)`` on ``path``; when someone else has it, call ``on_wait`` with
    their description, then wait."""
    try:
        fd = open_lock(path)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the lock file {path}: {exc.strerror}",
            f"make {path.parent} writable, or pull somewhere else with -o",
        ) from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait(wait_for_holder(fd))
            fcntl.flock(fd, fcntl.LOCK_EX)
        write_holder(fd, holder)
        yield
    finally:
        os.close(fd)


def is_held(path: Path) -> bool:
    """Whether some process holds ``flock`` on the lock file ``path`` right now."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
