"""Writable overlay images: ``ctrain overlay create`` and the lock an overlay's user holds.

An overlay is an ext3 image holding ``upper/`` and ``work/`` at its root, owned by the user.
ctrain always makes it itself with e2fsprogs, apptainer on PATH or not: a file made sparse
(truncate) or allocated (fallocate), then ``mkfs.ext3 -m 0 -d STAGE``. ``apptainer overlay
create`` would reserve 5% of the blocks for root (useless in an overlay) and, without
``--sparse``, write every byte; it runs the same ``mkfs.ext3 -d``, so it needs nothing ctrain's
path lacks. The image is built under ``.<name>.create-<token>`` and linked into place, so PATH
never holds half an overlay and an existing PATH is never replaced.

``lock_overlay`` takes the fcntl lock Apptainer takes on the image file (read for ``:ro``,
write for read-write) before ctrain execs the runtime, so a conflict is refused with a true
message before Apptainer starts, and the lock lasts as long as the container process.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import re
import struct
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ctrain.errors import ConfigError, ExternalToolError, LaunchError
from ctrain.util import fs, proc

MIB = 1024**2
MIN_SIZE = 64 * MIB
MAX_SIZE = 16 * 1024**4  # ext3 with 4 KiB blocks
MIN_INODES = 64
INODE_BYTES = 256  # mke2fs's default inode size: the inode tables must fit in half the image
SBIN = ("/usr/sbin", "/sbin")  # where Debian and RHEL keep mkfs.ext3, often off a user's PATH
MKFS_TIMEOUT = 900.0
MKFS_FIX = "check the directory and the options"
MKFS_OLD_FIX = "install e2fsprogs 1.43 or newer (mkfs.ext3 -d)"
TEMP_TAG = "create"  # overlays are built as .<name>.create-<token>
SIZE_FIX = "write it like 15G, 512M or 1T (binary units; a bare number is MiB)"

_UNITS = {"": MIB, "k": 1024, "m": MIB, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\Z", re.IGNORECASE)
_COUNT = re.compile(r"(\d+(?:\.\d+)?)\s*([km]?)\Z", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes in ``15G``, ``512M``, ``1.5T``, ``800MiB``, ``1024`` (MiB), rounded up to MiB.
    Malformed, below 64 MiB or above 16 TiB: a ConfigError."""
    amount = _SIZE.match(text.strip())
    if not amount:
        raise ConfigError(f"--size {text!r} is not a size", SIZE_FIX)
    number, unit = amount.groups()
    size = math.ceil(float(number) * _UNITS[unit.lower()] / MIB) * MIB
    if size < MIN_SIZE:
        raise ConfigError(f"--size {text} is below the minimum of 64M", "give at least --size 64M")
    if size > MAX_SIZE:
        raise ConfigError(f"--size {text} is above ext3's 16T", "give at most --size 16T")
    return size


def parse_inodes(text: str) -> int:
    """An inode count: ``500K`` (thousands), ``2M`` (millions) or a number; at least 64."""
    amount = _COUNT.match(text.strip())
    if not amount:
        raise ConfigError(f"--inodes {text!r} is not a count", "write it like 500K, 2M or 100000")
    number, unit = amount.groups()
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
    program: str  # mkfs.ext3


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
    mkfs = which("mkfs.ext3")
    if not mkfs:
        raise ExternalToolError(
            "mkfs.ext3 is not available to make the overlay",
            "install e2fsprogs (apt-get install e2fsprogs, dnf install e2fsprogs)",
        )
    return CreatePlan(path, size, inodes, sparse, mkfs)


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
# The lock Apptainer takes

# struct flock on 64-bit Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid (pid_t).
_FLOCK = struct.Struct("hhqqi")


def _blocker(fd: int, readonly: bool) -> tuple[bool, int]:
    """(whether the conflicting lock is a writer's, its pid) from F_GETLK."""
    wanted = fcntl.F_RDLCK if readonly else fcntl.F_WRLCK
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, _FLOCK.pack(wanted, os.SEEK_SET, 0, 0, 0))
    except OSError:
        return not readonly, 0
    kind, _, _, _, pid = _FLOCK.unpack(answer)
    if kind == fcntl.F_UNLCK:  # released between the two calls: still say who might have it
        return not readonly, 0
    return kind == fcntl.F_WRLCK, pid


def refusal(overlay: Path, readonly: bool, writer: bool, pid: int) -> LaunchError:
    """What a user is told when Apptainer would refuse the overlay: the rule and the fix."""
    who = f"pid {pid}" if pid > 0 else "another process"
    if writer:
        held = f"overlay {overlay} is in use read-write by {who}"
        if readonly:
            return LaunchError(
                f"{held}; Apptainer refuses a read-only mount while a writer runs",
                "wait for that job to end, or give this one its own overlay "
                "(ctrain overlay create)",
            )
        return LaunchError(
            f"{held}; Apptainer allows one writer at a time",
            "give each job its own overlay (ctrain overlay create), or wait for that job to end",
        )
    return LaunchError(
        f"overlay {overlay} is in use read-only by {who} (maybe more); "
        "Apptainer refuses a writer while readers use it",
        f"mount it read-only as well (--overlay {overlay}:ro), or wait until no job uses it",
    )


def lock_overlay(path: Path, readonly: bool) -> int | None:
    """Lock overlay ``path`` as Apptainer does: an fcntl read lock on the whole file for
    ``:ro``, a write lock for read-write (many readers or one writer). Returns the lock's fd,
    inheritable: fcntl locks survive ``os.execvpe``, so ctrain holds it until the container
    process ends. A conflict is a LaunchError saying what Apptainer would do; a filesystem
    without locks (ENOLCK) gets no lock and no message, as with Apptainer."""
    overlay = path.expanduser().resolve()
    mode = "read" if readonly else "read and write"
    try:
        fd = os.open(overlay, (os.O_RDONLY if readonly else os.O_RDWR) | os.O_CLOEXEC)
    except OSError as exc:
        fix = "check its permissions" + ("" if readonly else f", or use --overlay {overlay}:ro")
        raise LaunchError(f"cannot open overlay {overlay} to {mode}: {exc.strerror}", fix) from exc
    try:
        fcntl.lockf(fd, (fcntl.LOCK_SH if readonly else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno == errno.ENOLCK:
            os.close(fd)
            return None
        if exc.errno not in (errno.EACCES, errno.EAGAIN):
            os.close(fd)
            raise LaunchError(f"cannot lock overlay {overlay}: {exc.strerror}", "check it") from exc
        writer, pid = _blocker(fd, readonly)
        os.close(fd)
        raise refusal(overlay, readonly, writer, pid) from None
    os.set_inheritable(fd, True)
    return fd


def describe_overlay(plan: CreatePlan) -> str:
    inodes = f", {plan.inodes} inodes" if plan.inodes is not None else ""
    sparse = ", sparse" if plan.sparse else ""
    return f"{plan.path}: {fs.human(plan.size)} ext3 overlay{sparse}{inodes}, no reserved blocks"
