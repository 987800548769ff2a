"""The record of a pull (images/record.py): the sidecar, the target's state, the reuse
decision."""

from __future__ import annotations

import dataclasses
import datetime
import json
import locale
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctrain
from ctrain.images.record import (
    Sidecar,
    TargetState,
    archive_ref,
    archive_stamp,
    decide_reuse,
    new_sidecar,
    read_sidecar,
)
from tests.support.helpers import refusal

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
