"""What ctrain knows about a pulled image on disk: the SIF header check, the sidecar record
beside it, the argv that pull and inspect a SIF file, and whether a target can be reused, must
be pulled again, or is not ctrain's to replace.

A sidecar ``<target>.json`` records the reference, the digest when known, the time and ctrain's
version, and for an archive file (``docker-archive:``, ``oci-archive:``) its stamp; a target
whose sidecar names the same reference (and stamp) and whose file is whole is reused without a
download. Docker and Podman images live in the engine's store, their sidecars in
``CACHE/docker/``. All pure, except reading a file's first bytes and a sidecar.
"""

from __future__ import annotations

import datetime
import json
import os
import struct
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Literal

from ctrain import __version__
from ctrain.errors import ConfigError
from ctrain.names import loopback_registry

IMAGES_DIR = "images"  # pulled SIF files in the cache
ENGINE_DIR = "docker"  # sidecars of docker/podman pulls in the cache
CH_DIR = "charliecloud"  # Charliecloud image directories in the cache

# The SIF global header (sylabs/sif, pkg/sif): a 32-byte launch line, "SIF_MAGIC\0" at byte 32,
# a 3-byte version, a 3-byte arch, a 16-byte UUID, then 8 little-endian int64: created, modified,
# descriptors free, descriptors total, descriptors offset, descriptors size, data offset, data
# size. 128 bytes in all.
SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")
SIF_MAGIC = b"SIF_MAGIC\x00"
SIF_MAGIC_OFFSET = 32
SIF_VERSION = b"01\x00"  # the only version the sif loader accepts
DESCRIPTOR_SIZE = 585  # bytes of one descriptor: the loader reads total x 585 from the offset


def sidecar_of(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def lock_of(target: Path) -> Path:
    return target.with_name(target.name + ".lock")


def sif_pull_argv(program: str, temp: Path, ref: str, force: bool) -> list[str]:
    """Straight into ``temp``, not through Apptainer's cache: the image is stored once; a
    registry on the loopback interface over plain HTTP (``names.loopback_registry``)."""
    flags = ["--disable-cache", *(["--force"] if force else [])]
    if loopback_registry(ref):
        flags.append("--no-https")
    return [program, "pull", *flags, str(temp), ref]


def sif_inspect_argv(program: str, path: Path) -> list[str]:
    return [program, "inspect", str(path)]


# ---------------------------------------------------------------------------------------------
# The SIF header


def sif_problem(header: bytes, file_size: int) -> str | None:
    """Why these first bytes of a ``file_size``-byte file are not a whole SIF image, or None."""
    if len(header) < SIF_HEADER.size:
        return f"{file_size} bytes, shorter than a SIF header ({SIF_HEADER.size} bytes)"
    (_, magic, version, _, _, _, _, free, total, desc_off, desc_len, data_off, data_len) = (
        SIF_HEADER.unpack_from(header)
    )
    if magic != SIF_MAGIC:
        return f"no SIF_MAGIC at byte {SIF_MAGIC_OFFSET}: not a SIF image"
    if version != SIF_VERSION:
        shown = version.rstrip(b"\x00").decode("ascii", "replace")
        return f"SIF version {shown!r}, not 01 (the only one Apptainer reads)"
    if min(free, total, desc_len, data_off, data_len) < 0 or desc_off < SIF_HEADER.size:
        return "malformed SIF header"
    if desc_len != total * DESCRIPTOR_SIZE:
        each = DESCRIPTOR_SIZE
        return f"malformed SIF header: {total} descriptors in {desc_len} bytes, not {each} each"
    end = max(desc_off + desc_len, data_off + data_len)
    if end > file_size:
        return f"truncated: its header describes {end} bytes, the file has {file_size}"
    return None


def check_sif(path: Path) -> str | None:
    """``sif_problem`` for a file on disk (an unreadable file is a problem too)."""
    try:
        with path.open("rb") as handle:
            header = handle.read(SIF_HEADER.size)
            size = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        return f"cannot read it ({exc.strerror})"
    return sif_problem(header, size)


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


# ---------------------------------------------------------------------------------------------
# The reuse decision


Action = Literal["reuse", "pull", "refuse"]


@dataclass(frozen=True)
class TargetState:
    exists: bool
    size: int | None = None
    problem: str | None = None  # from check_sif


def target_state(target: Path) -> TargetState:
    """What is at ``target`` now: nothing, or a file and what is wrong with it."""
    try:
        size = target.stat().st_size
    except FileNotFoundError:
        return TargetState(False)
    if not target.is_file():
        raise ConfigError(f"{target} exists and is not a file", "choose another -o")
    return TargetState(True, size, check_sif(target))


def archive_stamp(size: int, mtime_ns: int, inode: int) -> str:
    """What tells one version of an archive file from the next (``docker save -o`` again
    writes a new file): its size, modification time and inode, as ``make`` would look."""
    return f"{size}:{mtime_ns}:{inode}"


def decide(
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
