"""The SIF header check refuses every negative field and a descriptor table inside the header."""

from __future__ import annotations

import pytest

from ctrain.images import sif
from tests.fake_apptainer import sif_bytes

# The eight int64 fields of the header, in order (sylabs/sif), and the byte each starts at.
FIELDS = ("created", "modified", "free", "total", "desc_off", "desc_len", "data_off", "data_len")
FIELD_OFFSET = 64


def _with(field: str, value: int) -> bytes:
    """A whole 1000-byte-payload SIF image with one header field replaced."""
    header, body = sif_bytes("docker://a/b:1", 1000)
    start = FIELD_OFFSET + 8 * FIELDS.index(field)
    return header[:start] + value.to_bytes(8, "little", signed=True) + header[start + 8 :] + body


def test_the_field_offsets_match_a_whole_image() -> None:
    data = _with("desc_off", sif.SIF_HEADER.size)
    assert sif.sif_problem(data[:128], len(data)) is None


@pytest.mark.parametrize("field", ["free", "total", "desc_len", "data_off", "data_len"])
@pytest.mark.parametrize("value", [-1, -(2**63)])
def test_a_negative_size_or_offset_is_malformed(field: str, value: int) -> None:
    data = _with(field, value)
    assert sif.sif_problem(data[:128], len(data)) == "malformed SIF header"


@pytest.mark.parametrize("value", [-1, 0, 100, sif.SIF_HEADER.size - 1])
def test_descriptors_inside_the_header_are_malformed(value: int) -> None:
    data = _with("desc_off", value)
    assert sif.sif_problem(data[:128], len(data)) == "malformed SIF header"
