"""Checkpoints under faults, with real TensorFlow: a full disk and a read-only directory end the
run with one ``ctrain: error:`` line (where, why, the free space, the checkpoint still intact),
never a traceback or a half checkpoint; a damaged newest checkpoint is passed over with a warning
naming it and the one used, and the run resumes to the uninterrupted run's weights.

The full disk and the read-only directory are small tmpfs mounts (root), sized from a checkpoint
of the same model measured first.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctrain.errors import CheckpointError
from tests.support.real_runs import BIN, SCRIPTS, clean_env

RESUMABLE = SCRIPTS / "train_resumable.py"
UNITS = "20000"  # about 2.4 MB a checkpoint (weights and Adam's two slots)
pytestmark = [pytest.mark.tensorflow, pytest.mark.timeout(600)]


def train(out: Path, epochs: int, restart: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "python"), str(RESUMABLE), str(out), str(epochs), "--units", UNITS],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="2", SLURM_RESTART_COUNT=str(restart)),
    )


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def the_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The run's one ``ctrain: error:`` line, after checking it ended with CheckpointError's
    code and no traceback."""
    assert done.returncode == CheckpointError.exit_code == 6, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("ctrain: error:")]
    return line


@contextmanager
def tmpfs(at: Path, *options: str) -> Iterator[Path]:
    at.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(at)],
                   check=True, timeout=30)  # fmt: skip
    try:
        yield at
    finally:
        subprocess.run(["umount", str(at)], check=True, timeout=30)


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory: pytest.TempPathFactory) -> int:
    out = tmp_path_factory.mktemp("measure")
    done = train(out, 1)
    assert done.returncode == 0, done.stderr[-3000:]
    (written,) = (out / "ckpt").iterdir()
    return sum(p.stat().st_size for p in written.iterdir())


def test_a_full_disk_ends_with_one_line_and_the_previous_checkpoint_intact(
    tmp_path: Path, checkpoint_bytes: int
) -> None:
    size = checkpoint_bytes * 3 // 2 // 1024  # room for one checkpoint, not two
    with tmpfs(tmp_path / "ckpt", f"size={size}k") as ckpt:
        line = the_error_line(train(tmp_path, 3))
        assert line.startswith(
            f"ctrain: error: checkpoint ckpt-e000002-s000000000 could not be written in {ckpt}: "
            "No space left on device ("
        ), line
        assert f"free there); {ckpt}/ckpt-e000001-s000000000 is intact Fix: " in line, line
        assert line.endswith("then run again: it resumes from ckpt-e000001-s000000000"), line
        assert names(ckpt) == ["ckpt-e000001-s000000000"]  # no half checkpoint beside it


def test_a_read_only_directory_ends_with_one_line_before_any_checkpoint(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ckpt", "ro", "size=1m") as ckpt:
        line = the_error_line(train(tmp_path, 2))
    assert line.startswith(
        f"ctrain: error: checkpoint ckpt-e000001-s000000000 could not be written in {ckpt}: "
        "Read-only file system ("
    ), line
    assert "free there); no earlier checkpoint is there Fix: " in line, line


def damage(checkpoint: Path) -> None:
    """The same number of bytes, other values: the manifest still matches, TensorFlow's
    checksums do not."""
    (data,) = checkpoint.glob("state.data-*")
    data.write_bytes(bytes(255 - b for b in data.read_bytes()))


def test_a_damaged_newest_checkpoint_is_passed_over_with_a_warning(tmp_path: Path) -> None:
    reference, out = tmp_path / "reference", tmp_path / "out"
    assert train(reference, 3).returncode == 0
    assert train(out, 2).returncode == 0
    ckpt = out / "ckpt"
    assert names(ckpt) == ["ckpt-e000001-s000000000", "ckpt-e000002-s000000000"]
    damage(ckpt / "ckpt-e000002-s000000000")
    done = train(out, 3, restart=1)
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("ctrain: warning:")]
    assert len(warnings) == 1, done.stderr[-3000:]
    assert warnings[0].startswith(
        f"ctrain: warning: checkpoint {ckpt}/ckpt-e000002-s000000000 is unreadable: "
    ), warnings
    assert warnings[0].endswith(f"; resuming from {ckpt}/ckpt-e000001-s000000000"), warnings
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["start"] for r in runs] == [[0, 0], [1, 0]]
    final = [json.loads((d / "final-rank0.json").read_text()) for d in (reference, out)]
    assert final[0]["weights"] == final[1]["weights"]


def test_no_loadable_checkpoint_is_an_error_not_a_start_over(tmp_path: Path) -> None:
    assert train(tmp_path, 2).returncode == 0
    ckpt = tmp_path / "ckpt"
    damage(ckpt / "ckpt-e000002-s000000000")
    (ckpt / "ckpt-e000001-s000000000" / "manifest.json").write_text("{")
    line = the_error_line(train(tmp_path, 3, restart=1))
    assert line.startswith(
        f"ctrain: error: no checkpoint in {ckpt} can be loaded (ckpt-e000001-s000000000: its "
        "manifest.json is damaged; ckpt-e000002-s000000000: "
    ), line
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 1  # the second run never trained
