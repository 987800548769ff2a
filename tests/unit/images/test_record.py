"""The record of a pull (the sidecar, the target's state, the reuse decision) and the SIF header
check, field by field as the sif loader reads it: magic, version ``01``, no negative field,
descriptors after the header and exactly total x 585 bytes, nothing beyond the end of the file.
Headers are packed here from the layout, not taken from the stand-in."""

from __future__ import annotations

import dataclasses
import datetime
import json
import locale
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctrain
from ctrain.errors import ConfigError
from ctrain.images import sif_header
from ctrain.images.record import (
    Sidecar,
    TargetState,
    archive_ref,
    archive_stamp,
    decide_reuse,
    new_sidecar,
    read_sidecar,
    sif_state,
)
from tests.support.helpers import refusal

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


REF = "docker://a/b:1"


def sidecar(ref: str = REF, size: int | None = 5096) -> Sidecar:
    return Sidecar(ref, "apptainer", "2026-01-02T03:04:05Z", "0.1.0", size=size)


WHOLE = TargetState(True, 5096, None)
DAMAGED = TargetState(True, 5096, "truncated: x")
GROWN = TargetState(True, 7000, None)
CHANGED = "changed since the pull (7000 bytes, 5096 recorded)"


@pytest.mark.parametrize(
    ("record", "state", "owned", "force", "decision"),
    [
        (None, TargetState(False), False, False, ("pull", "not present")),
        (sidecar(), TargetState(False), True, True, ("pull", "not present")),
        (None, WHOLE, False, False, ("refuse", "exists and was not pulled by ctrain (no sidecar)")),
        (None, WHOLE, True, False, ("pull", "no sidecar")),
        (None, WHOLE, False, True, ("pull", "--force")),
        (sidecar("docker://a/b:0"), WHOLE, False, False, ("refuse", "holds docker://a/b:0, not docker://a/b:1")),
        (sidecar("docker://a/b:0"), WHOLE, True, False, ("pull", "holds docker://a/b:0")),
        (sidecar("docker://a/b:0"), WHOLE, False, True, ("pull", "--force")),
        (sidecar(), WHOLE, False, True, ("pull", "--force")),
        (sidecar(), WHOLE, True, True, ("pull", "--force")),
        (sidecar(), DAMAGED, False, False, ("pull", "damaged (truncated: x)")),
        (sidecar(), GROWN, True, False, ("pull", CHANGED)),
        (sidecar(size=None), GROWN, False, False, ("reuse", "up to date")),
        (sidecar(), WHOLE, False, False, ("reuse", "up to date")),
        (sidecar(), WHOLE, True, False, ("reuse", "up to date")),
    ],
)  # fmt: skip
def test_reuse_pull_or_refuse(
    record: Sidecar | None,
    state: TargetState,
    owned: bool,
    force: bool,
    decision: tuple[str, str],
) -> None:
    assert decide_reuse(record, REF, state, owned, force) == decision


@pytest.mark.parametrize(
    ("recorded", "now", "decision"),
    [
        ("10:5:7", "10:5:7", ("reuse", "up to date")),
        ("10:5:7", "10:6:7", ("pull", "the archive changed since the pull")),
        ("10:5:7", "10:5:8", ("pull", "the archive changed since the pull")),
        (None, "10:5:7", ("pull", "the archive changed since the pull")),
        (None, None, ("reuse", "up to date")),
    ],
)
def test_an_archive_is_pulled_again_when_its_stamp_changed(
    recorded: str | None, now: str | None, decision: tuple[str, str]
) -> None:
    record = dataclasses.replace(sidecar(), source_stamp=recorded)
    assert decide_reuse(record, REF, WHOLE, True, False, now) == decision


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


def test_sidecar_json_and_back(tmp_path: Path) -> None:
    record = Sidecar("r", "docker", "t", "v", "sha256:1", 7, "sha256:2", "/x", "7:8:9")
    text = record.to_json()
    assert text == (
        '{\n  "ctrain_version": "v",\n  "digest": "sha256:1",\n  "image_id": "sha256:2",\n'
        '  "pulled_at": "t",\n  "ref": "r",\n  "runtime": "docker",\n  "size": 7,\n'
        '  "source_stamp": "7:8:9",\n  "target": "/x"\n}\n'
    )
    assert Sidecar.parse(text) == record
    path = tmp_path / "x.sif.json"
    path.write_text(text)
    assert read_sidecar(path) == record
    path.write_bytes(b"\xff")
    assert read_sidecar(path) is None
    assert read_sidecar(tmp_path / "missing.json") is None


@pytest.mark.parametrize(
    "changes",
    [
        {"runtime": None},
        {"pulled_at": 1},
        {"ctrain_version": None},
        {"image_id": 2},
        {"target": []},
        {"size": 1.5},
        {"size": False},
        {"source_stamp": 5},
    ],
)
def test_a_sidecar_with_a_wrong_type_is_not_one(changes: dict[str, object]) -> None:
    data = {"ref": "r", "runtime": "a", "pulled_at": "t", "ctrain_version": "v", **changes}
    assert Sidecar.parse(json.dumps(data)) is None


def test_a_sidecar_with_nulls_and_a_size() -> None:
    data = {"ref": "r", "runtime": "a", "pulled_at": "t", "ctrain_version": "v"}
    nulls = {"digest": None, "image_id": None, "target": None, "size": None}
    assert Sidecar.parse(json.dumps({**data, **nulls})) == Sidecar("r", "a", "t", "v")
    assert Sidecar.parse(json.dumps({**data, "size": 0})) == Sidecar("r", "a", "t", "v", size=0)


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Local time 5 h 30 min ahead of UTC, for this test only."""
    monkeypatch.setenv("TZ", "IST-5:30")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("far_from_utc")
def test_a_new_sidecar_is_stamped_now_in_utc_by_this_ctrain() -> None:
    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    record = new_sidecar("r", "apptainer", "sha256:1", size=9, image_id="i", target="/t")
    after = datetime.datetime.now(datetime.timezone.utc)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record.pulled_at)
    stamped = datetime.datetime.strptime(record.pulled_at, "%Y-%m-%dT%H:%M:%S%z")
    assert before <= stamped <= after
    assert record == Sidecar(
        "r", "apptainer", record.pulled_at, ctrain.__version__, "sha256:1", 9, "i", "/t"
    )
    assert new_sidecar("r", "docker", None) == Sidecar(
        "r", "docker", new_sidecar("r", "docker", None).pulled_at, ctrain.__version__
    )
    archived = new_sidecar("oci-archive:/a.tar", "apptainer", None, source_stamp="7:8:9")
    assert archived == Sidecar(
        "oci-archive:/a.tar", "apptainer", archived.pulled_at, ctrain.__version__,
        source_stamp="7:8:9",
    )  # fmt: skip


@pytest.fixture
def ascii_locale() -> Iterator[None]:
    """The C locale's ASCII as the locale's encoding, for this test only."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    yield
    locale.setlocale(locale.LC_CTYPE, before)


@pytest.mark.usefixtures("ascii_locale")
def test_a_sidecar_is_read_as_utf8_whatever_the_locale(tmp_path: Path) -> None:
    """JSON is UTF-8 (RFC 8259): a sidecar written with the letters themselves (ctrain writes
    ``\\u00fc``) reads the same under an ASCII locale."""
    record = Sidecar("docker-archive:/data/ünï.tar", "apptainer", "t", "v", source_stamp="1:2:3")
    path = tmp_path / "x.sif.json"
    path.write_bytes(json.dumps(dataclasses.asdict(record), ensure_ascii=False).encode())
    assert read_sidecar(path) == record


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


def test_archive_ref(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An archive's path made absolute, with its stamp when it is here; others as they are."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.tar").write_bytes(b"x" * 10)
    info = (tmp_path / "a.tar").stat()
    stamp = archive_stamp(10, info.st_mtime_ns, info.st_ino)
    assert archive_ref("docker-archive://a.tar") == (f"docker-archive:{tmp_path}/a.tar", stamp)
    assert archive_ref("oci-archive:gone.tar") == (f"oci-archive:{tmp_path}/gone.tar", None)
    assert archive_ref("docker://a/b:1") == ("docker://a/b:1", None)


def test_archive_ref_refusals(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"")
    assert refusal(lambda: archive_ref(f"docker-archive:{tmp_path}/a:b.tar")) == (
        f"docker-archive {tmp_path}/a:b.tar: apptainer reads what follows a ':' as an image "
        "inside the archive",
        "link the archive under a path without ':' (ln -s) and give that",
    )
    assert refusal(lambda: archive_ref(f"oci-archive:{tmp_path}/f/a.tar")) == (
        f"oci-archive {tmp_path}/f/a.tar: Not a directory",
        "give a readable archive",
    )
    assert refusal(lambda: archive_ref(f"docker-archive:{tmp_path}")) == (
        f"docker-archive {tmp_path} is not a file",
        "give the archive file's path",
    )
