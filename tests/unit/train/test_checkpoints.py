"""Atomic checkpoints, the latest complete one, fingerprints: no TensorFlow needed."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import ctrain.distributed
from ctrain.errors import CheckpointError
from ctrain.names import Launched, Mode
from ctrain.train import checkpoints
from ctrain.train.checkpoints import Fingerprint

FP = checkpoints.fingerprint({"layers": [1, 2]}, {"lr": 0.1})


def state_writer(payload: bytes) -> Any:
    def write(prefix: Path) -> None:
        Path(f"{prefix}.index").write_bytes(b"index")
        Path(f"{prefix}.data-00000-of-00001").write_bytes(payload)

    return write


def save(directory: Path, epoch: int, step: int = 0, keep: int = 2, fp: Fingerprint = FP) -> Path:
    return checkpoints.write(directory, epoch, step, fp, state_writer(b"e%d" % epoch), {}, keep)


def test_requeue_exit_code_is_shared_with_the_training_api() -> None:
    assert ctrain.distributed.REQUEUE_EXIT_CODE == checkpoints.REQUEUE_EXIT_CODE == 75


def test_write_then_latest(tmp_path: Path) -> None:
    assert checkpoints.latest(tmp_path / "none") is None
    first = save(tmp_path, 1)
    assert first.name == "ckpt-e000001-s000000000"
    found = checkpoints.latest(tmp_path)
    assert found is not None and found.path == first
    assert found.manifest.epoch == 1 and found.manifest.step == 0
    assert found.manifest.fingerprint == FP
    assert found.state == first / "state"
    assert Path(f"{found.state}.data-00000-of-00001").read_bytes() == b"e1"
    assert sorted(found.manifest.files) == ["state.data-00000-of-00001", "state.index"]


def test_latest_orders_by_epoch_then_step_and_keeps_the_newest(tmp_path: Path) -> None:
    save(tmp_path, 1)
    save(tmp_path, 2, step=5)
    save(tmp_path, 2, step=40)
    save(tmp_path, 10)
    names = [f.path.name for f in checkpoints.complete(tmp_path)]
    assert names == ["ckpt-e000002-s000000040", "ckpt-e000010-s000000000"]


def test_a_failed_write_leaves_the_previous_one(tmp_path: Path) -> None:
    save(tmp_path, 1)

    def broken(prefix: Path) -> None:
        Path(f"{prefix}.index").write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        checkpoints.write(tmp_path, 2, 0, FP, broken)
    found = checkpoints.latest(tmp_path)
    assert found is not None and found.manifest.epoch == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-e000001-s000000000"]


def test_a_killed_writers_leftovers_are_ignored_then_removed(tmp_path: Path) -> None:
    save(tmp_path, 1)
    leftover = tmp_path / ".tmp-ckpt-dead"
    leftover.mkdir()
    (leftover / "state.index").write_bytes(b"partial")
    found = checkpoints.latest(tmp_path)
    assert found is not None and found.manifest.epoch == 1
    save(tmp_path, 2)
    assert not leftover.exists()


def test_a_damaged_checkpoint_is_not_complete_and_the_scan_says_why(tmp_path: Path) -> None:
    first = save(tmp_path, 1)
    second = save(tmp_path, 2, keep=3)
    third = save(tmp_path, 3, keep=3)
    (third / "state.data-00000-of-00001").write_bytes(b"truncated!")
    found = checkpoints.latest(tmp_path)
    assert found is not None and found.manifest.epoch == 2
    (second / "manifest.json").write_text("{not json")
    (tmp_path / ".tmp-ckpt-abc").mkdir()  # a write in progress (or killed): neither
    scan = checkpoints.scan(tmp_path)
    assert [f.path for f in scan.whole] == [first]
    assert scan.broken == [
        (second, "its manifest.json is damaged"),
        (third, "its file state.data-00000-of-00001 has 10 bytes where manifest.json says 2"),
    ]
    (first / "state.index").unlink()
    assert checkpoints.inspect(first) == "its file state.index is missing"
    (first / "manifest.json").unlink()
    assert checkpoints.inspect(first).startswith("its manifest.json cannot be read (No such file")
    assert checkpoints.latest(tmp_path) is None


def test_the_lines_for_a_checkpoint_passed_over_and_for_none_loadable(tmp_path: Path) -> None:
    first, second = tmp_path / "ckpt-e000001-s000000000", tmp_path / "ckpt-e000002-s000000000"
    assert checkpoints.passed_over(second, "its manifest.json is damaged", first) == (
        f"ctrain: warning: checkpoint {second} is unreadable: its manifest.json is damaged; "
        f"resuming from {first}"
    )
    error = checkpoints.none_loadable(tmp_path, [(first, "bad a"), (second, "bad b")])
    assert error.exit_code == 6
    assert error.line() == (
        f"ctrain: error: no checkpoint in {tmp_path} can be loaded (ckpt-e000001-s000000000: "
        f"bad a; ckpt-e000002-s000000000: bad b) Fix: move {tmp_path} aside to start over, or "
        "put back a readable checkpoint"
    )


def test_a_checkpoint_not_written_names_where_why_the_free_space_and_the_intact_one(
    tmp_path: Path,
) -> None:
    error = checkpoints.unwritten(tmp_path, 2, 5, "No space left on device")
    assert error.exit_code == 6
    assert error.line().startswith(
        f"ctrain: error: checkpoint ckpt-e000002-s000000005 could not be written in {tmp_path}: "
        "No space left on device ("
    )
    assert "free there); no earlier checkpoint is there Fix: free space in" in error.line()
    assert error.line().endswith("then run again: it starts from the beginning")
    first = save(tmp_path, 1)
    line = checkpoints.unwritten(tmp_path, 2, 0, "Read-only file system").line()
    assert f"free there); {first} is intact Fix:" in line
    assert line.endswith("then run again: it resumes from ckpt-e000001-s000000000")


def test_the_same_position_written_again_replaces_it(tmp_path: Path) -> None:
    save(tmp_path, 3)
    checkpoints.write(tmp_path, 3, 0, FP, state_writer(b"again"), {}, 2)
    found = checkpoints.latest(tmp_path)
    assert found is not None
    assert Path(f"{found.state}.data-00000-of-00001").read_bytes() == b"again"
    assert len(list(tmp_path.iterdir())) == 1


def test_keep_must_keep_one(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="would delete every checkpoint"):
        save(tmp_path, 1, keep=0)


def test_manifest_records_the_job(tmp_path: Path) -> None:
    launched = Launched(
        mode=Mode.HOROVOD,
        rank=1,
        size=2,
        local_rank=1,
        local_size=2,
        collective="nccl",
        collective_timeout=600,
    ).to_env()
    environ = {"SLURM_JOB_ID": "12", "SLURM_RESTART_COUNT": "2", "HOME": "/h", **launched}
    info = checkpoints.job_info(environ)
    path = checkpoints.write(tmp_path, 1, 0, FP, state_writer(b"x"), info)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["info"]["SLURM_JOB_ID"] == "12"
    assert manifest["info"]["SLURM_RESTART_COUNT"] == "2"
    assert manifest["info"]["CTRAIN_LAUNCH_MODE"] == "horovod"
    assert manifest["info"]["CTRAIN_WORLD_SIZE"] == "2"
    assert "HOME" not in manifest["info"] and "CTRAIN_RANK" not in manifest["info"]


def test_fingerprints_ignore_generated_names_but_not_the_architecture() -> None:
    a = {"name": "sequential", "layers": [{"name": "dense", "units": 4}]}
    b = {"name": "sequential_7", "layers": [{"name": "dense_12", "units": 4}]}
    c = {"name": "sequential", "layers": [{"name": "dense", "units": 8}]}
    assert checkpoints.fingerprint(a) == checkpoints.fingerprint(b)
    assert checkpoints.fingerprint(a).architecture != checkpoints.fingerprint(c).architecture
    assert checkpoints.fingerprint(a, {"lr": 1}).config != checkpoints.fingerprint(a).config
    reordered = checkpoints.fingerprint(a, {"y": 2, "x": 1})
    assert checkpoints.fingerprint(a, {"x": 1, "y": 2}) == reordered


@pytest.mark.parametrize(
    ("other", "what"),
    [
        (checkpoints.fingerprint({"layers": [1, 3]}, {"lr": 0.1}), "model architecture"),
        (checkpoints.fingerprint({"layers": [1, 2]}, {"lr": 0.2}), "training configuration"),
        (checkpoints.fingerprint({"layers": [9]}, {}), "model architecture and training"),
    ],
)
def test_a_checkpoint_of_another_model_or_config_is_refused(
    tmp_path: Path, other: Fingerprint, what: str
) -> None:
    save(tmp_path, 1)
    found = checkpoints.latest(tmp_path)
    assert found is not None
    checkpoints.check(found, FP)
    with pytest.raises(CheckpointError) as info:
        checkpoints.check(found, other)
    assert what in info.value.message and "refusing" in info.value.message
    assert "another checkpoint directory" in info.value.fix
    assert info.value.exit_code == 6


@dataclass
class FakeVariable:
    shape: tuple[int, ...]
    dtype: Any = field(default_factory=lambda: type("D", (), {"name": "float32"})())


class FakeOptimizer:
    def get_config(self) -> dict[str, Any]:
        return {"name": "Adam", "learning_rate": 0.02, "beta_1": 0.9, "jit_compile": True}


class FakeModel:
    def __init__(self, units: int, optimizer: Any = None) -> None:
        self.units = units
        self.optimizer = optimizer
        self.weights = [FakeVariable((8, units)), FakeVariable((units,))]

    def get_config(self) -> dict[str, Any]:
        return {"name": "m", "layers": [{"class_name": "Dense", "config": {"units": self.units}}]}


def test_describe_model_keeps_what_a_checkpoint_depends_on() -> None:
    described = checkpoints.describe_model(FakeModel(4, FakeOptimizer()))
    assert described["weights"] == [[[8, 4], "float32"], [[4], "float32"]]
    assert described["optimizer"] == {"class": "FakeOptimizer", "config": {"beta_1": 0.9}}
    same = checkpoints.fingerprint(checkpoints.describe_model(FakeModel(4, FakeOptimizer())))
    other = checkpoints.fingerprint(checkpoints.describe_model(FakeModel(5, FakeOptimizer())))
    assert checkpoints.fingerprint(described) == same != other
