"""The record of an image ctrain pulled, which every store keeps: the sidecar ``<target>.json``
beside a file in the cache (or in ``CACHE/docker/`` for an engine's image), the pull's lock, the
cache's folders, and whether a target can be reused, must be pulled again, or is not ctrain's
to replace.

A sidecar records the reference, the digest when known, the time and ctrain's version, and for
an archive file (``docker-archive:``, ``oci-archive:``) its stamp; a target whose sidecar names
the same reference (and stamp) and whose file is whole is reused without a download. All pure,
except reading a sidecar, a target's size and header, and an archive's ``stat``.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal

from ctrain import __version__
from ctrain.errors import ConfigError
from ctrain.references import archive_path

IMAGES_DIR = "images"  # pulled SIF files in the cache
ENGINE_DIR = "docker"  # sidecars of docker/podman pulls in the cache
CH_DIR = "charliecloud"  # Charliecloud image directories in the cache


def sidecar_of(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def lock_of(target: Path) -> Path:
    return target.with_name(target.name + ".lock")


# ---------------------------------------------------------------------------------------------
# Sidecars


@dataclass(frozen=True)
class Sidecar:
    ref: str
    runtime: str
    pulled_at: str  # ISO 8601, UTC
    ctrain_version: str
    digest: str | None = None
    size: int | None = None  # bytes of the SIF file
    image_id: str | None = None  # docker/podman image id
    target: str | None = None
    source_stamp: str | None = None  # an archive file's ``archive_stamp`` when it was pulled

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def parse(cls, text: str) -> Sidecar | None:
        """The sidecar in ``text``, or None when it is not one (never raises)."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("ref", "runtime", "pulled_at", "ctrain_version"):
            if not isinstance(values.get(name), str):
                return None
        for name in ("digest", "image_id", "target", "source_stamp"):
            if values.get(name) is not None and not isinstance(values[name], str):
                return None
        size = values.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
            return None
        return cls(**values)


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_sidecar(
    ref: str,
    runtime: str,
    digest: str | None,
    *,
    size: int | None = None,
    image_id: str | None = None,
    target: str | None = None,
    source_stamp: str | None = None,
) -> Sidecar:
    """The record of a pull made now by this ctrain."""
    return Sidecar(
        ref, runtime, now_iso(), __version__, digest, size, image_id, target, source_stamp
    )


def read_sidecar(path: Path) -> Sidecar | None:
    try:
        return Sidecar.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def archive_ref(ref: str) -> tuple[str, str | None]:
    """``ref`` with an archive's path made absolute (two directories' ``img.tar`` are two
    images), and the archive's stamp now; other references as they are, without a stamp. An
    archive that is not here (a compute node may not see it) has no stamp: a pull of it is
    trusted as a registry's is offline, and a new pull is refused (images.stores.sif)."""
    path = archive_path(ref)
    if path is None:
        return ref, None
    scheme = ref.partition(":")[0]
    if ":" in str(path):
        raise ConfigError(
            f"{scheme} {path}: apptainer reads what follows a ':' as an image inside the archive",
            "link the archive under a path without ':' (ln -s) and give that",
        )
    try:
        info = path.stat()
    except FileNotFoundError:
        return f"{scheme}:{path}", None
    except OSError as exc:
        raise ConfigError(f"{scheme} {path}: {exc.strerror}", "give a readable archive") from None
    if not path.is_file():
        raise ConfigError(f"{scheme} {path} is not a file", "give the archive file's path")
    return f"{scheme}:{path}", archive_stamp(info.st_size, info.st_mtime_ns, info.st_ino)


# ---------------------------------------------------------------------------------------------
# The reuse decision


Action = Literal["reuse", "pull", "refuse"]


@dataclass(frozen=True)
class TargetState:
    exists: bool
    size: int | None = None
    problem: str | None = None  # what is wrong with it, in the store's format (None: nothing)


def archive_stamp(size: int, mtime_ns: int, inode: int) -> str:
    """What tells one version of an archive file from the next (``docker save -o`` again
    writes a new file): its size, modification time and inode, as ``make`` would look."""
    return f"{size}:{mtime_ns}:{inode}"


def decide_reuse(
    sidecar: Sidecar | None,
    ref: str,
    state: TargetState,
    owned: bool,
    force: bool,
    stamp: str | None = None,
) -> tuple[Action, str]:
    """Reuse, pull or refuse a SIF target, and why.

    ``owned``: the target is in ctrain's cache (a file there without a sidecar is ctrain's own
    leftover). Outside the cache ctrain replaces only what it pulled itself, unless ``force``.
    ``stamp``: the source archive's ``archive_stamp`` now (None for a registry or a daemon)."""
    if not state.exists:
        return "pull", "not present"
    if sidecar is None and not owned and not force:
        return "refuse", "exists and was not pulled by ctrain (no sidecar)"
    if sidecar is not None and sidecar.ref != ref and not owned and not force:
        return "refuse", f"holds {sidecar.ref}, not {ref}"
    if force:
        return "pull", "--force"
    if sidecar is None:
        return "pull", "no sidecar"
    if sidecar.ref != ref:
        return "pull", f"holds {sidecar.ref}"
    if stamp is not None and sidecar.source_stamp != stamp:
        return "pull", "the archive changed since the pull"
    if state.problem:
        return "pull", f"damaged ({state.problem})"
    if sidecar.size is not None and state.size != sidecar.size:
        return "pull", f"changed since the pull ({state.size} bytes, {sidecar.size} recorded)"
    return "reuse", "up to date"
