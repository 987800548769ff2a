"""SIF-shaped files: the global header the sif loader checks (facts: "SIF global header"), 48
descriptors of 585 bytes, a JSON descriptor with the image's metadata (environment, labels,
deffile, %environment script) and a partition descriptor whose bytes stand for the squashfs."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from tests.support.standin.identity import Fatal

HEADER = struct.Struct("<32s10s3s3s16s8q")
DESCRIPTOR = struct.Struct("<iBIIIqqqqqqq128s384s")  # 585 bytes, packed
MAGIC, VERSION = b"SIF_MAGIC\x00", b"01\x00"
TOTAL = 48  # descriptors a new SIF has room for
DESCRIPTORS_OFFSET = 4096
DATA_OFFSET = DESCRIPTORS_OFFSET + ((TOTAL * DESCRIPTOR.size) // 4096 + 1) * 4096
GENERIC_JSON, PARTITION = 0x4006, 0x4004  # sif DataType values
CREATED = 1700000000

Metadata = dict[str, object]


def mapping(metadata: Metadata, key: str) -> dict[str, str]:
    """A dict field of the metadata (environment, labels), empty when absent."""
    value = metadata.get(key)
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def strings(metadata: Metadata, key: str) -> list[str]:
    """A list field of the metadata (entrypoint, cmd), empty when absent."""
    value = metadata.get(key)
    return [str(v) for v in value] if isinstance(value, list) else []


def sif_bytes(ref: str, payload: int, metadata: Metadata | None = None) -> tuple[bytes, bytes]:
    """(everything before the partition, the partition) of a SIF image for ``ref``: header,
    descriptors, the JSON metadata, then ``payload`` bytes derived from ``ref``."""
    blob = json.dumps(metadata or {}, sort_keys=True).encode()
    body = (ref.encode() * (payload // max(1, len(ref)) + 1))[:payload]
    descriptors = b"".join(
        DESCRIPTOR.pack(kind, 1, number, 0, 0, offset, size, size, CREATED, CREATED, 0, 0,
                        name, b"")
        for number, (kind, offset, size, name) in enumerate(
            [(GENERIC_JSON, DATA_OFFSET, len(blob), b"inspect-metadata.json"),
             (PARTITION, DATA_OFFSET + len(blob), payload, b"rootfs.squashfs")], start=1)
    )  # fmt: skip
    header = HEADER.pack(
        b"#!/usr/bin/env run-singularity\n", MAGIC, VERSION, b"02\x00", b"0123456789abcdef",
        CREATED, CREATED, TOTAL - 2, TOTAL, DESCRIPTORS_OFFSET, TOTAL * DESCRIPTOR.size,
        DATA_OFFSET, len(blob) + payload,
    )  # fmt: skip
    table = descriptors.ljust(TOTAL * DESCRIPTOR.size, b"\x00")
    head = header.ljust(DESCRIPTORS_OFFSET, b"\x00") + table
    return head.ljust(DATA_OFFSET, b"\x00") + blob, body


def metadata_for(
    env: dict[str, str], labels: dict[str, str] | None = None, deffile: str = "", script: str = ""
) -> Metadata:
    """The JSON metadata: ``env`` as an OCI config's Env (10-docker2singularity.sh), ``script``
    as a definition's %environment (90-environment.sh)."""
    return {"environment": env, "labels": labels or {}, "deffile": deffile, "script": script}


def make_sif(
    path: Path,
    env: dict[str, str],
    labels: dict[str, str] | None = None,
    deffile: str = "",
    payload: int = 4096,
) -> Path:
    """A SIF image at ``path`` whose container environment is ``env`` (for tests)."""
    head, body = sif_bytes(str(path), payload, metadata_for(env, labels, deffile))
    path.write_bytes(head + body)
    return path


def header_problem(head: bytes) -> str | None:
    """What the sif loader refuses in these first bytes (sif load.go), or None."""
    if len(head) < HEADER.size or head[32:42] != MAGIC:
        return "invalid SIF file: SIF magic not found"
    if head[42:45] != VERSION:
        return f"invalid SIF file: unsupported version {head[42:45]!r}"
    total, _, size = HEADER.unpack_from(head)[8:11]
    if size != total * DESCRIPTOR.size:
        return f"invalid SIF file: descriptors size {size} is not {total} x {DESCRIPTOR.size}"
    return None


def read_metadata(path: Path) -> Metadata:
    """The image's JSON metadata (empty when it has none); Fatal when it is not a SIF."""
    try:
        with path.open("rb") as handle:
            head = handle.read(HEADER.size)
            problem = header_problem(head)
            if problem:
                raise Fatal(f"could not open image {path}: {problem}")
            total, offset = HEADER.unpack_from(head)[8:10]
            handle.seek(offset)
            table = handle.read(total * DESCRIPTOR.size)
            for start in range(0, len(table) - DESCRIPTOR.size + 1, DESCRIPTOR.size):
                kind, used, *_, at, size = DESCRIPTOR.unpack_from(table, start)[:7]
                if used and kind == GENERIC_JSON:
                    handle.seek(at)
                    found = json.loads(handle.read(size))
                    return found if isinstance(found, dict) else {}
    except OSError as exc:
        raise Fatal(f"could not open image {path}: {exc.strerror}") from exc
    return {}


def is_sif(path: Path) -> bool:
    with path.open("rb") as handle:
        return header_problem(handle.read(HEADER.size)) is None
