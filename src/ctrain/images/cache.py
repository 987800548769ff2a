"""``ctrain cache info`` and ``ctrain cache clean``: what is in the cache directory, and removing
what has not changed for a while.

The cache directory (``cachedir.resolve_cache_dir``) holds Apptainer's own cache and ``tmp/``,
ctrain's pulled SIF files in ``images/`` (each with its ``.json`` sidecar), the sidecars of
docker/podman pulls in ``docker/``, and Charliecloud image directories in ``charliecloud/``
(each one entry: removed whole, by its own age, never file by file).

Cleaning goes by modification time. An image and its sidecar go together, by the image's age;
``*.lock`` files stay (removing a lock someone holds would let a second holder in); an image
whose pull lock is held right now is skipped, and while any pull or build holds
``in-use.lock`` (``cachedir.in_use``), so is what may be its work in progress: Apptainer's
``cache/`` and ``tmp/``, ``tmp-copy-*``, ``build-temp-*`` and ctrain's temporary files.
Directories emptied by the clean go too, except the cache itself and its ``tmp/``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctrain.errors import ConfigError
from ctrain.images.cachedir import CacheChoice, in_use_lock
from ctrain.images.record import (
    CH_DIR,
    ENGINE_DIR,
    IMAGES_DIR,
    Sidecar,
    lock_of,
    read_sidecar,
    sidecar_of,
)
from ctrain.util import locks
from ctrain.util.fs import human

APPTAINER_WORK_DIRS = ("cache", "tmp")  # Apptainer's cache (CACHEDIR/cache) and CACHE/tmp
APPTAINER_WORK_PREFIXES = ("tmp-copy-", "build-temp-")  # its files while it pulls or builds
BUSY = "a pull or build is using the cache"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+)\s*([smhdw])\Z")
DURATION_FIX = "write a number and a unit: 30d, 12h, 2w, 90m or 45s"


def parse_duration(text: str) -> int:
    """Seconds in ``30d``, ``12h``, ``2w``, ``90m``, ``45s``."""
    duration = _DURATION.match(text.strip().lower())
    if not duration:
        raise ConfigError(f"--older-than {text!r} is not a duration", DURATION_FIX)
    return int(duration.group(1)) * _UNITS[duration.group(2)]


# ---------------------------------------------------------------------------------------------
# Sizes and listings


def disk_usage(path: Path, seen: set[tuple[int, int]] | None = None) -> int:
    """Bytes allocated to ``path`` and everything under it (symlinks not followed; hard links
    counted once), like ``du``."""
    seen = set() if seen is None else seen
    try:
        info = path.lstat()
    except OSError:
        return 0
    if (info.st_dev, info.st_ino) in seen:
        return 0
    seen.add((info.st_dev, info.st_ino))
    total = info.st_blocks * 512
    if stat.S_ISDIR(info.st_mode):
        with contextlib.suppress(OSError):
            for child in path.iterdir():
                total += disk_usage(child, seen)
    return total


@dataclass(frozen=True)
class Entry:
    name: str  # relative to the cache directory
    kind: str  # "dir", "file" or "link"
    size: int
    mtime: float


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    return "link" if stat.S_ISLNK(mode) else "file"


def top_entries(root: Path) -> list[Entry]:
    """The cache directory's top-level entries, largest first."""
    entries = []
    with contextlib.suppress(FileNotFoundError):
        for child in root.iterdir():
            with contextlib.suppress(FileNotFoundError):
                info = child.lstat()
                entries.append(
                    Entry(child.name, _kind(info.st_mode), disk_usage(child), info.st_mtime)
                )
    return sorted(entries, key=lambda e: (-e.size, e.name))


def sidecars(root: Path) -> list[tuple[Path, Sidecar]]:
    """Records of pulled images: ``images/*.json`` and ``docker/*.json``."""
    records = []
    for sub in (IMAGES_DIR, ENGINE_DIR):
        with contextlib.suppress(OSError):
            for path in sorted((root / sub).glob("*.json")):
                sidecar = read_sidecar(path)
                if sidecar is not None:
                    records.append((path, sidecar))
    return records


def info(choice: CacheChoice) -> dict[str, Any]:
    """Everything ``ctrain cache info`` shows, as plain data."""
    root = choice.path
    exists = root.is_dir()
    free = shutil.disk_usage(root).free if exists else None
    pulled = []
    for path, sidecar in sidecars(root):
        image = path.with_name(path.name[: -len(".json")])
        is_sif = path.parent.name == IMAGES_DIR
        pulled.append(
            {
                **{k: v for k, v in vars(sidecar).items() if v is not None},
                "sidecar": str(path),
                "file": str(image) if is_sif else None,
                "present": image.is_file() if is_sif else None,
            }
        )
    entries = top_entries(root) if exists else []
    return {
        "path": str(root),
        "source": choice.source,
        "under_home": choice.under_home,
        "exists": exists,
        "size": sum(e.size for e in entries),
        "free": free,
        "entries": [vars(e) for e in entries],
        "images": pulled,
    }


def _when(mtime: float) -> str:
    return datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).strftime("%Y-%m-%d")


def render_info(data: dict[str, Any], as_json: bool) -> str:
    if as_json:
        return json.dumps(data, indent=2)
    lines = [f"cache   {data['path']}  ({data['source']})"]
    if not data["exists"]:
        lines.append("        does not exist yet (the first pull creates it)")
        return "\n".join(lines)
    lines.append(f"size    {human(data['size'])}, {human(data['free'])} free on its filesystem")
    for entry in data["entries"]:
        slash = "/" if entry["kind"] == "dir" else ""
        lines.append(
            f"  {human(entry['size']):>10}  {_when(entry['mtime'])}  {entry['name']}{slash}"
        )
    if data["images"]:
        lines.append("pulled images:")
    for item in data["images"]:
        where = item["file"] if item["file"] else f"{item['runtime']} store"
        missing = "" if item["present"] is not False else "  (file missing)"
        digest = f"  {item['digest']}" if item.get("digest") else ""
        lines.append(f"  {item['ref']}{digest}  pulled {item['pulled_at']}  -> {where}{missing}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Clean


@dataclass
class Removal:
    paths: list[Path]  # removed together: an image and its sidecar
    size: int
    mtime: float
    note: str = ""


@dataclass
class CleanPlan:
    removals: list[Removal] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(r.size for r in self.removals)


def _files(root: Path) -> Iterator[Path]:
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            yield Path(directory) / name
        whole = Path(directory) == root / CH_DIR  # each image directory is one entry
        for name in dirs:  # symlinks to directories are removed as links, never followed
            if whole or (Path(directory) / name).is_symlink():
                yield Path(directory) / name
        if whole:
            dirs.clear()


def _pull_target(path: Path) -> Path:
    """The image a file belongs to: ``.x.sif.pull-123`` (a pull's temporary file) or
    ``.x.sif.build-123`` (a build's) -> ``x.sif``."""
    for marker in (".pull-", ".build-"):
        if path.name.startswith(".") and marker in path.name:
            return path.with_name(path.name[1 : path.name.index(marker)])
    return path


def _work_in_progress(root: Path, path: Path) -> bool:
    """Whether ``path`` may belong to a pull or build that is running: Apptainer's own cache
    and temporary space, its ``tmp-copy-*`` and ``build-temp-*``, ctrain's temporary files."""
    parts = path.relative_to(root).parts
    return (
        parts[0] in APPTAINER_WORK_DIRS
        or any(part.startswith(APPTAINER_WORK_PREFIXES) for part in parts)
        or _pull_target(path) != path
    )


def plan_clean(root: Path, cutoff: float) -> CleanPlan:
    """What ``cache clean`` removes: files under ``root`` last modified before ``cutoff`` (an
    epoch time), a sidecar together with its image."""
    plan = CleanPlan()
    if not root.is_dir():
        return plan
    files = list(_files(root))
    present = set(files)
    busy = locks.is_held(in_use_lock(root))
    for path in files:
        if path.name.endswith(".lock"):
            continue
        if path.name.endswith(".json") and path.with_name(path.name[:-5]) in present:
            continue  # a sidecar goes with its image
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        if info.st_mtime >= cutoff:
            continue
        if busy and _work_in_progress(root, path):
            plan.skipped.append((path, BUSY))
            continue
        group = [path]
        size = disk_usage(path)
        sidecar = sidecar_of(path)
        if sidecar in present:
            group.append(sidecar)
            size += disk_usage(sidecar)
        if locks.is_held(lock_of(_pull_target(path))):
            plan.skipped.append((path, "a pull holds its lock"))
            continue
        note = "and its sidecar" if len(group) > 1 else ""
        plan.removals.append(Removal(group, size, info.st_mtime, note))
    return plan


def apply_clean(root: Path, plan: CleanPlan) -> list[str]:
    """Remove what ``plan`` lists, then directories that became empty (not ``root``, not
    ``root/tmp``). Returns problems, one line each."""
    problems = []
    parents = set()
    for removal in plan.removals:
        for path in removal.paths:
            try:
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                problems.append(f"cannot remove {path}: {exc.strerror}")
            parents.add(path.parent)
    keep = {root, root / "tmp"}
    for directory in sorted(parents, key=lambda p: len(p.parts), reverse=True):
        current = directory
        while current not in keep and current.is_relative_to(root):
            try:
                current.rmdir()
            except OSError:
                break
            current = current.parent
    return problems


def render_clean(root: Path, plan: CleanPlan, dry_run: bool) -> list[str]:
    verb = "would remove" if dry_run else "removed"
    lines = []
    for removal in plan.removals:
        name = removal.paths[0].relative_to(root)
        extra = f" ({removal.note})" if removal.note else ""
        lines.append(f"{verb}  {human(removal.size):>10}  {_when(removal.mtime)}  {name}{extra}")
    for path, why in plan.skipped:
        lines.append(f"kept  {path.relative_to(root)}: {why}")
    total = f"{len(plan.removals)} entries, {human(plan.size)}"
    lines.append(f"{'would free' if dry_run else 'freed'} {total} in {root}")
    return lines
