"""Writable overlay images: ``ctrain overlay create`` and the lock a read-write user holds.

An overlay is an ext3 image holding ``upper/`` and ``work/`` at its root, owned by the user.
With apptainer on PATH (and no ``--inodes``, which it cannot set) ctrain runs its own
``apptainer overlay create``; otherwise e2fsprogs builds one: a file made sparse (truncate) or
allocated (fallocate), then ``mkfs.ext3 -d STAGE`` from a staging directory. Either way the
image is built under ``.<name>.create-<token>`` and linked into place, so PATH never holds half
an overlay and an existing PATH is never replaced.

``acquire_rw_lock`` takes ``flock(LOCK_EX|LOCK_NB)`` on ``<overlay>.lock`` (or on a lock file in
the cache when the overlay's directory is read-only) and returns the fd marked inheritable: it
survives ``ctrain exec``'s exec, so the lock is held exactly as long as the container process.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ctrain.errors import ConfigError, ExternalToolError, LaunchError
from ctrain.util import fs, locks, proc

MIB = 1024**2
MIN_SIZE = 64 * MIB
MAX_SIZE = 16 * 1024**4  # ext3 with 4 KiB blocks
MIN_INODES = 64
INODE_BYTES = 256  # mke2fs's default inode size: the inode tables must fit in half the image
SBIN = ("/usr/sbin", "/sbin")  # where Debian and RHEL keep mkfs.ext3, often off a user's PATH
MKFS_TIMEOUT = 900.0
MKFS_FIX = "check the directory and the options"
MKFS_OLD_FIX = "install e2fsprogs 1.43 or newer (mkfs.ext3 -d), or use apptainer overlay create"
TEMP_TAG = "create"  # overlays are built as .<name>.create-<token>
SIZE_FIX = "write it like 15G, 512M or 1T (binary units; a bare number is MiB)"

_UNITS = {"": MIB, "k": 1024, "m": MIB, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\Z", re.IGNORECASE)
_COUNT = re.compile(r"(\d+(?:\.\d+)?)\s*([km]?)\Z", re.IGNORECASE)

Method = Literal["apptainer", "e2fsprogs"]


def parse_size(text: str) -> int:
    """Bytes in ``15G``, ``512M``, ``1.5T``, ``800MiB``, ``1024`` (MiB), rounded up to MiB.
    Malformed, below 64 MiB or above 16 TiB: a ConfigError."""
    found = _SIZE.match(text.strip())
    if not found:
        raise ConfigError(f"--size {text!r} is not a size", SIZE_FIX)
    number, unit = found.groups()
    size = math.ceil(float(number) * _UNITS[unit.lower()] / MIB) * MIB
    if size < MIN_SIZE:
        raise ConfigError(f"--size {text} is below the minimum of 64M", "give at least --size 64M")
    if size > MAX_SIZE:
        raise ConfigError(f"--size {text} is above ext3's 16T", "give at most --size 16T")
    return size


def parse_inodes(text: str) -> int:
    """An inode count: ``500K`` (thousands), ``2M`` (millions) or a number; at least 64."""
    found = _COUNT.match(text.strip())
    if not found:
        raise ConfigError(f"--inodes {text!r} is not a count", "write it like 500K, 2M or 100000")
    number, unit = found.groups()
    count = int(float(number) * {"": 1, "k": 1000, "m": 1000**2}[unit.lower()])
    if count < MIN_INODES:
        raise ConfigError(
            f"--inodes {text} is below {MIN_INODES}", f"give --inodes {MIN_INODES} or more"
        )
    return count


def max_inodes(size: int) -> int:
    return size // 2 // INODE_BYTES


# ---------------------------------------------------------------------------------------------
# argv builders


def apptainer_create_argv(program: str, path: Path, size: int, sparse: bool) -> list[str]:
    return [
        program, "overlay", "create", "--size", str(size // MIB),
        *(["--sparse"] if sparse else []), str(path),
    ]  # fmt: skip


def mkfs_argv(
    program: str,
    image: Path,
    stage: Path,
    inodes: int | None,
    uid: int,
    gid: int,
    sparse: bool,
) -> list[str]:
    """ext3 (journal, no extents) from ``stage``; no blocks reserved for root in an overlay.
    A preallocated image keeps its blocks: mke2fs would otherwise discard (punch) them."""
    extended = f"root_owner={uid}:{gid}" + ("" if sparse else ",nodiscard")
    return [
        program, "-q", "-m", "0", "-d", str(stage), "-E", extended,
        *(["-N", str(inodes)] if inodes is not None else []), str(image),
    ]  # fmt: skip


def tool_finder(environ: Mapping[str, str]) -> Callable[[str], str | None]:
    """``which`` over PATH, then /usr/sbin and /sbin."""
    path = os.pathsep.join([environ.get("PATH", os.defpath), *SBIN])
    return lambda name: proc.which(name, {"PATH": path})


# ---------------------------------------------------------------------------------------------
# Create


@dataclass(frozen=True)
class CreatePlan:
    path: Path
    size: int  # bytes, whole MiB
    inodes: int | None
    sparse: bool
    method: Method
    program: str


def plan_create(
    path_text: str,
    size_text: str | None,
    inodes_text: str | None,
    sparse: bool,
    which: Callable[[str], str | None],
) -> CreatePlan:
    """Everything checked before a byte is written."""
    if not path_text.strip() or "\n" in path_text or "\0" in path_text:
        raise ConfigError(f"overlay path {path_text!r} is not usable", "give a file path")
    path = Path(path_text).expanduser().absolute()
    if size_text is None:
        raise ConfigError("overlay create needs --size", "add --size, for example --size 15G")
    size = parse_size(size_text)
    inodes = None if inodes_text is None else parse_inodes(inodes_text)
    if inodes is not None and inodes > max_inodes(size):
        raise ConfigError(
            f"--inodes {inodes_text} does not fit in {fs.human(size)} (at most {max_inodes(size)})",
            "give a larger --size or fewer --inodes",
        )
    if path.exists() or path.is_symlink():
        raise ConfigError(
            f"{path} already exists",
            "choose a new path: ctrain never overwrites an overlay (remove the old one yourself)",
        )
    if not path.parent.is_dir():
        raise ConfigError(
            f"directory {path.parent} does not exist", f"create it first (mkdir -p {path.parent})"
        )
    if not sparse and fs.free_bytes(path.parent) < size:
        raise ConfigError(
            f"not enough free space in {path.parent} for {fs.human(size)}",
            "free some space, choose a smaller --size, or add --sparse",
        )
    apptainer = which("apptainer") if inodes is None else None
    if apptainer:
        return CreatePlan(path, size, inodes, sparse, "apptainer", apptainer)
    mkfs = which("mkfs.ext3")
    if not mkfs:
        raise ExternalToolError(
            "neither apptainer nor mkfs.ext3 is available to make the overlay",
            "install e2fsprogs (apt-get install e2fsprogs) or load the site's apptainer module",
        )
    return CreatePlan(path, size, inodes, sparse, "e2fsprogs", mkfs)


def _allocate(path: Path, size: int, sparse: bool) -> None:
    with path.open("xb") as handle:
        if sparse:
            os.truncate(handle.fileno(), size)
        else:
            os.posix_fallocate(handle.fileno(), 0, size)


def _stage(root: Path, uid: int, gid: int) -> None:
    for name in ("upper", "work"):
        (root / name).mkdir(mode=0o755)
        (root / name).chmod(0o755)
        if os.geteuid() == 0 and (uid, gid) != (0, 0):
            os.chown(root / name, uid, gid)


def _mkfs(plan: CreatePlan, image: Path, uid: int, gid: int, environ: Mapping[str, str]) -> None:
    _allocate(image, plan.size, plan.sparse)
    with tempfile.TemporaryDirectory(prefix="ctrain-overlay-") as stage:
        _stage(Path(stage), uid, gid)
        argv = mkfs_argv(plan.program, image, Path(stage), plan.inodes, uid, gid, plan.sparse)
        try:
            proc.check(argv, environ, MKFS_TIMEOUT, what="mkfs.ext3", fix=MKFS_FIX)
        except ExternalToolError as exc:
            if "invalid option" in exc.message or "root_owner" in exc.message:
                raise ExternalToolError(exc.message, MKFS_OLD_FIX) from exc
            raise


def _apptainer_create(plan: CreatePlan, image: Path, environ: Mapping[str, str]) -> None:
    argv = apptainer_create_argv(plan.program, image, plan.size, plan.sparse)
    fix = "run it by hand: " + " ".join(argv[:-1] + [str(plan.path)])
    proc.check(argv, environ, MKFS_TIMEOUT, what="apptainer overlay create", fix=fix)
    if not image.is_file():
        raise ExternalToolError("apptainer overlay create made no image file", fix)


def create(plan: CreatePlan, uid: int, gid: int, environ: Mapping[str, str]) -> None:
    """Build the overlay ``plan`` describes; on any failure nothing is left at ``plan.path``.

    Creates in one directory take turns on ``flock`` of the directory itself (no lock file is
    left behind); under it, leftovers of killed creates of the same PATH are removed. The image
    is linked into place, never renamed over: an existing PATH is never replaced."""
    try:
        fd = os.open(plan.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"cannot open {plan.path.parent}: {exc.strerror}", "check it") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if plan.path.exists() or plan.path.is_symlink():
            raise ConfigError(f"{plan.path} already exists", "choose a new path")
        fs.remove_leftovers(plan.path.parent, fs.temp_prefix(plan.path, TEMP_TAG))
        temp = fs.temp_beside(plan.path, TEMP_TAG)
        with fs.atomic(plan.path, temp, replace=False):
            if plan.method == "apptainer":
                _apptainer_create(plan, temp, environ)
            else:
                _mkfs(plan, temp, uid, gid, environ)
    except FileExistsError:
        raise ConfigError(
            f"{plan.path} appeared while the overlay was built", "choose another path"
        ) from None
    except OSError as exc:
        fix = "free some space, choose a smaller --size, or add --sparse"
        raise fs.write_error(exc, plan.path, fix) from exc
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# The read-write lock


def lock_file_for(overlay: Path) -> Path:
    return overlay.with_name(overlay.name + ".lock")


def fallback_lock_file(overlay: Path, lock_dir: Path) -> Path:
    """The lock for an overlay in a read-only directory: one file per overlay path."""
    key = hashlib.sha256(str(overlay).encode()).hexdigest()[:16]
    return lock_dir / f"overlay-{key}-{overlay.name}.lock"


def _open_lock(overlay: Path, lock_dir: Callable[[], Path]) -> tuple[int, Path]:
    primary = lock_file_for(overlay)
    try:
        return locks.open_lock(primary), primary
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise ConfigError(
                f"cannot open the lock file {primary}: {exc.strerror}", f"check {overlay.parent}"
            ) from exc
    directory = lock_dir()
    fallback = fallback_lock_file(overlay, directory)
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return locks.open_lock(fallback), fallback
    except OSError as exc:
        raise ConfigError(
            f"cannot create the lock file {fallback}: {exc.strerror}",
            "set CTRAIN_CACHE_DIR to a writable directory",
        ) from exc


def acquire_rw_lock(
    path: Path,
    holder: str,
    *,
    lock_dir: Callable[[], Path],
    environ: Mapping[str, str] | None = None,
) -> int:
    """Lock overlay ``path`` for one read-write user; return the lock's fd, inheritable.

    The lock lasts while any process holds the fd: keep it open across ``os.execvpe``. A second
    user gets a LaunchError naming ``holder`` of the first (what it wrote into the lock file)
    and suggesting ``:ro``. ``lock_dir`` gives the directory to lock in when ``path``'s own is
    read-only (``cachedir.lock_dir``); it is asked only then."""
    env = os.environ if environ is None else environ
    overlay = path.expanduser().resolve()
    fd, _ = _open_lock(overlay, lock_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        who = locks.read_holder(fd) or "another process (it recorded no name)"
        os.close(fd)
        raise LaunchError(
            f"overlay {overlay} is in use read-write by {who}",
            f"use it read-only (--overlay {overlay}:ro), give each job its own overlay, "
            "or wait for that job to end",
        ) from None
    locks.write_holder(fd, holder or locks.describe_holder("ctrain", env))
    os.set_inheritable(fd, True)
    return fd


def describe_overlay(plan: CreatePlan) -> str:
    how = "apptainer overlay create" if plan.method == "apptainer" else "mkfs.ext3"
    inodes = f", {plan.inodes} inodes" if plan.inodes is not None else ""
    sparse = ", sparse" if plan.sparse else ""
    return f"{plan.path}: {fs.human(plan.size)} ext3 overlay{sparse}{inodes} ({how})"
