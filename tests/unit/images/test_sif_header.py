"""The SIF header check (images/sif_header.py), field by field as the sif loader reads it:
magic, version ``01``, no negative field, descriptors after the header and exactly total x 585
bytes, nothing beyond the end of the file; and the SIF store's reading of a file on disk with it
(images/stores/sif.py's ``sif_state``). Headers are packed here from the layout, not taken from
the stand-in."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from ctrain.errors import ConfigError
from ctrain.images import sif_header
from ctrain.images.record import TargetState
from ctrain.images.stores.sif import sif_state

# The eight int64 fields of the header, in order (sylabs/sif).
FIELDS = ("created", "modified", "free", "total", "desc_off", "desc_len", "data_off", "data_len")
TOTAL = 48  # descriptors Apptainer allocates in a new image
DATA_OFFSET = 4096 + TOTAL * 585
GOOD = {
    "created": 1700000000,
    "modified": 1700000000,
    "free": 45,
    "total": TOTAL,
    "desc_off": 4096,
    "desc_len": TOTAL * 585,
    "data_off": DATA_OFFSET,
    "data_len": 1000,
}


def image(version: bytes = b"01\0", magic: bytes = b"SIF_MAGIC\0", **fields: int) -> bytes:
    """A whole image: header, zeros up to the data, the data."""
    values = {**GOOD, **fields}
    header = sif_header.SIF_HEADER.pack(
        b"#!/usr/bin/env run-singularity\n", magic, version, b"02\0", b"0123456789abcdef",
        *(values[name] for name in FIELDS),
    )  # fmt: skip
    return header.ljust(DATA_OFFSET, b"\0") + b"d" * 1000


def problem(data: bytes) -> str | None:
    return sif_header.sif_problem(data[: sif_header.SIF_HEADER.size], len(data))


def test_a_whole_image_passes() -> None:
    assert problem(image()) is None


@pytest.mark.parametrize("version", [b"02\0", b"1\0\0", b"00\0", b"\0\0\0"])
def test_only_version_01_is_read(version: bytes) -> None:
    shown = version.rstrip(b"\0").decode()
    said = f"SIF version {shown!r}, not 01 (the only one Apptainer reads)"
    assert problem(image(version)) == said


def test_no_magic_is_not_a_sif() -> None:
    assert problem(image(magic=b"NOT_MAGIC\0")) == "no SIF_MAGIC at byte 32: not a SIF image"


@pytest.mark.parametrize(("total", "size"), [(48, 0), (48, 48 * 585 - 1), (1, 586)])
def test_descriptors_must_be_total_times_585_bytes(total: int, size: int) -> None:
    assert problem(image(total=total, desc_len=size)) == (
        f"malformed SIF header: {total} descriptors in {size} bytes, not 585 each"
    )


@pytest.mark.parametrize("field", ["free", "total", "desc_len", "data_off", "data_len"])
@pytest.mark.parametrize("value", [-1, -(2**63)])
def test_a_negative_size_or_offset_is_malformed(field: str, value: int) -> None:
    assert problem(image(**{field: value})) == "malformed SIF header"


@pytest.mark.parametrize("value", [-1, 0, 100, sif_header.SIF_HEADER.size - 1])
def test_descriptors_inside_the_header_are_malformed(value: int) -> None:
    assert problem(image(desc_off=value)) == "malformed SIF header"


def test_a_truncated_image_is_named() -> None:
    data = image()[:-10]
    size = len(data)
    said = f"truncated: its header describes {size + 10} bytes, the file has {size}"
    assert problem(data) == said
    assert problem(data[:100]) == "100 bytes, shorter than a SIF header (128 bytes)"


@pytest.mark.parametrize(
    "data",
    [b"", b"SIF_MAGIC\0" + bytes(4000), b"<html>" + b" " * 4000],
    ids=["empty", "at 0", "html"],
)
def test_not_a_sif(data: bytes) -> None:
    assert problem(data) in (
        f"{len(data)} bytes, shorter than a SIF header (128 bytes)",
        "no SIF_MAGIC at byte 32: not a SIF image",
    )


def test_check_sif_on_disk(tmp_path: Path) -> None:
    good = tmp_path / "good.sif"
    good.write_bytes(image())
    bad = tmp_path / "bad.sif"
    bad.write_bytes(image()[:4200])
    assert sif_header.check_sif(good) is None
    assert "truncated" in str(sif_header.check_sif(bad))
    assert "cannot read" in str(sif_header.check_sif(tmp_path / "missing"))


def test_a_header_only_image_is_whole() -> None:
    """128 bytes: no descriptors (total 0, none free), no data, both right after the header."""
    data = image(free=0, total=0, desc_off=128, desc_len=0, data_off=128, data_len=0)[:128]
    assert problem(data) is None


@pytest.mark.parametrize("field", ["created", "modified", "free"])
def test_zero_in_any_other_field_is_fine(field: str) -> None:
    assert problem(image(**{field: 0})) is None


def test_descriptors_beyond_the_end_are_truncation_too() -> None:
    """Data first, descriptors after it: the end is whichever region ends last."""
    data = image(data_off=128, data_len=10)[:20000]
    said = f"truncated: its header describes {4096 + TOTAL * 585} bytes, the file has 20000"
    assert problem(data) == said


def test_a_version_that_is_not_text_is_shown_replaced() -> None:
    said = "SIF version '\ufffd1', not 01 (the only one Apptainer reads)"
    assert problem(image(b"\xff1\0")) == said
    said = "SIF version '0X', not 01 (the only one Apptainer reads)"
    assert problem(image(b"0X\0")) == said


def test_check_sif_says_why_a_file_cannot_be_read(tmp_path: Path) -> None:
    assert (
        sif_header.check_sif(tmp_path / "missing") == "cannot read it (No such file or directory)"
    )
    assert sif_header.check_sif(tmp_path) == "cannot read it (Is a directory)"
    short = tmp_path / "short.sif"
    short.write_bytes(image()[:127])
    assert sif_header.check_sif(short) == "127 bytes, shorter than a SIF header (128 bytes)"


def test_sif_state(tmp_path: Path) -> None:
    whole = tmp_path / "whole.sif"
    whole.write_bytes(image())
    cut = tmp_path / "cut.sif"
    cut.write_bytes(image()[:-1])
    assert sif_state(tmp_path / "missing.sif") == TargetState(False)
    assert sif_state(whole) == TargetState(True, len(image()), None)
    size = len(image()) - 1
    said = f"truncated: its header describes {size + 1} bytes, the file has {size}"
    assert sif_state(cut) == TargetState(True, size, said)
    with pytest.raises(ConfigError) as caught:
        sif_state(tmp_path)
    assert (caught.value.message, caught.value.fix) == (
        f"{tmp_path} exists and is not a file",
        "choose another -o",
    )


def test_check_sif_reads_the_header_alone(tmp_path: Path) -> None:
    """Not the whole file (gigabytes): a pipe that never ends is answered from its 128 bytes."""
    reader, writer = os.pipe()
    os.write(writer, bytes(200))
    said: list[str | None] = []
    check = threading.Thread(
        target=lambda: said.append(sif_header.check_sif(Path(f"/dev/fd/{reader}"))), daemon=True
    )
    check.start()
    check.join(5)
    answered = not check.is_alive()
    os.close(writer)  # ends the pipe: a read to its end returns
    check.join()
    os.close(reader)
    assert answered
    assert said == ["no SIF_MAGIC at byte 32: not a SIF image"]
