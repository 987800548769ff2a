"""Directories under /var/tmp that outlive one test (a cluster directory, a SIF, a copy of the
source, scripts/fresh-state.sh's sandbox): each is named after the process that made it, and a
later test run removes those whose maker is gone.

A run that is killed (a session's end, a timeout's SIGKILL, a machine's stop) runs neither a
``finally`` nor ``atexit``: its directories stayed, gigabytes a run (a cluster directory of 2.8
GiB, a foreign SIF of 1.2 GiB, a sandbox's tens of GiB), until CI's run found the disk full.

The name: ``ctrain-KIND-pidNS.PID-RANDOM``, NS the inode of the maker's pid namespace (a sandbox's
processes have pids of their own, and share /var/tmp), PID its pid there. A directory is a
leftover where no process is PID in NS, and NS is one this process sees: a namespace some process
it sees is in, or any namespace where this process is in the machine's first one (which sees every
process; in a sandbox, a namespace it does not see may be the machine's). A mount inside a
directory keeps it (nothing is removed across a mount).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

ROOT = Path("/var/tmp")
NAME = re.compile(r"ctrain-[a-z-]+-pid(\d+)\.(\d+)-[^/]+")
FIRST_PID_NAMESPACE = 0xEFFFFFFC  # the kernel's PROC_PID_INIT_INO: 4026531836


def _namespace(link: str) -> int:
    """``pid:[4026531836]`` -> 4026531836"""
    return int(link.split("[")[1].rstrip("]"))


def pid_namespace() -> int:
    """The inode of this process's pid namespace."""
    return _namespace(os.readlink("/proc/self/ns/pid"))


def make(kind: str, root: Path = ROOT) -> Path:
    """A new directory ``ctrain-KIND-pidNS.PID-RANDOM`` under ROOT, this process's."""
    prefix = f"ctrain-{kind}-pid{pid_namespace()}.{os.getpid()}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def leftovers(
    names: Iterable[str], alive: Collection[tuple[int, int]], sees_all: bool
) -> list[str]:
    """The NAMES whose (namespace, pid) is not in ALIVE, of a namespace ALIVE has or any where
    SEES_ALL."""
    seen = {namespace for namespace, _ in alive}
    found = []
    for name in names:
        match = NAME.fullmatch(name)
        if not match:
            continue
        maker = (int(match[1]), int(match[2]))
        if maker not in alive and (sees_all or maker[0] in seen):
            found.append(name)
    return found


def _alive() -> set[tuple[int, int]]:
    """(pid namespace, pid in it) of every process this one sees (the last of NSpid's pids is the
    one in the process's own namespace)."""
    alive = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            namespace = _namespace(os.readlink(f"/proc/{entry}/ns/pid"))
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:  # ended meanwhile
            continue
        nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
        alive.add((namespace, int(nspid.split()[-1])))
    return alive


def _mount_points() -> list[Path]:
    """This mount namespace's mount points (field 5 of /proc/self/mountinfo, octal escapes
    undone)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        field = line.split()[4]
        points.append(Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)))
    return points


def remove_leftovers(root: Path = ROOT) -> list[Path]:
    """Remove ROOT's directories whose maker is gone (see the module's docstring), but any with a
    mount point inside; the ones removed."""
    names = [entry.name for entry in root.iterdir() if entry.is_dir() and not entry.is_symlink()]
    mounts = _mount_points()
    removed = []
    sees_all = pid_namespace() == FIRST_PID_NAMESPACE
    for name in leftovers(names, _alive(), sees_all):
        path = root / name
        if any(point == path or path in point.parents for point in mounts):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


@contextlib.contextmanager
def directory(kind: str, root: Path = ROOT) -> Iterator[Path]:
    """``make(kind, root)``, removed at the end."""
    path = make(kind, root)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
