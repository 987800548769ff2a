"""The SIF file check: whether a file's first bytes are the header of a whole SIF image, as
Apptainer's loader reads it. Pure, except ``check_sif``'s read of a file's first bytes.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

# The SIF global header (sylabs/sif, pkg/sif): a 32-byte launch line, "SIF_MAGIC\0" at byte 32,
# a 3-byte version, a 3-byte arch, a 16-byte UUID, then 8 little-endian int64: created, modified,
# descriptors free, descriptors total, descriptors offset, descriptors size, data offset, data
# size. 128 bytes in all.
SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")
SIF_MAGIC = b"SIF_MAGIC\x00"
SIF_MAGIC_OFFSET = 32
SIF_VERSION = b"01\x00"  # the only version the sif loader accepts
DESCRIPTOR_SIZE = 585  # bytes of one descriptor: the loader reads total x 585 from the offset


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
