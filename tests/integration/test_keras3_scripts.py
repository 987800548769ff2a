"""Keras 3 scripts (tests/scripts/keras3_*.py) through ``ctrain launch`` in every mode: two
ranks end with identical weights, and a multi-worker run equals one process taking the same
global batches. Refused combinations stop before the first step with one line."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN
from tests.support.real_runs import BIN, clean_env, run

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
SRUN = ["srun", "-t", "5", "--kill-on-bad-exit=1", "-n", "2"]
TIMEOUT = 240


def results(out: Path, done: str) -> list[dict[str, object]]:
    """The ``RESULT {json}`` line of every rank, from the per-rank output files."""
    found = []
    for path in sorted(out.glob("rank-*.txt")):
        lines = [line for line in path.read_text().splitlines() if line.startswith("RESULT ")]
        assert len(lines) == 1, f"{path.name}: no result\n{done}\n{path.read_text()[-3000:]}"
        found.append(json.loads(lines[0].removeprefix("RESULT ")))
    return found


def launched(
    out: Path, script: str, *args: str, starter: tuple[str, ...] = (), mode: str = "auto"
) -> list[dict[str, object]]:
    """Run ``script`` through ``ctrain launch`` (under ``starter``, e.g. srun) into ``out``."""
    out.mkdir()
    python = [str(BIN / "python"), str(SCRIPTS / script), str(out), *args]
    command = [CTRAIN, "launch", "--mode", mode, "--", *python]
    if starter:
        argv = [*starter, "--output", f"{out}/rank-%t.txt", "--error", f"{out}/rank-%t.txt"]
        done = run([*argv, *command], clean_env(), timeout=TIMEOUT)
    else:
        done = run(command, clean_env(), timeout=TIMEOUT)
        (out / "rank-0.txt").write_text(done.stdout)
    return results(out, done.stderr[-3000:])


def close(a: object, b: object) -> bool:
    return a == pytest.approx(b, rel=1e-4, abs=1e-5)


@pytest.mark.slurm
@pytest.mark.tensorflow
def test_keras3_multiworker_equals_one_process(tmp_path: Path) -> None:
    chief, worker = launched(tmp_path / "two", "keras3_strategy.py", starter=tuple(SRUN))
    (one,) = launched(tmp_path / "one", "keras3_strategy.py", mode="mirrored")
    assert (chief["task"], worker["task"], chief["replicas"], one["replicas"]) == (0, 1, 2, 1)
    assert chief["weights"] == worker["weights"]
    assert chief["loss"] == worker["loss"] and chief["val_loss"] == worker["val_loss"]
    for key in ("weights", "loss", "val_loss", "evaluated", "predicted"):
        assert close(chief[key], one[key]), key
    assert chief["restored_same"] is True and one["restored_same"] is True


def refused(out: Path, starter: list[str], mode: str, script: str, arg: str) -> list[str]:
    """Each rank's one error line, from a run that must stop before its first step."""
    out.mkdir()
    python = [str(BIN / "python"), str(SCRIPTS / script), str(out), arg]
    argv = [*starter, "--error", f"{out}/err-%t.txt", CTRAIN, "launch", "--mode", mode]
    done = subprocess.run(
        [*argv, "--quiet", "--", *python],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode != 0
    assert not (out / "model.keras").exists()
    lines = []
    for rank in (0, 1):
        errors = (out / f"err-{rank}.txt").read_text()
        assert "Traceback" not in errors, errors
        lines += [line for line in errors.splitlines() if line.startswith("ctrain: error:")]
    return lines


@pytest.mark.slurm
@pytest.mark.tensorflow
def test_keras3_steps_per_execution_is_refused_in_one_line(tmp_path: Path) -> None:
    lines = refused(tmp_path / "out", SRUN, "auto", "keras3_strategy.py", "2")
    assert len(lines) == 2
    for line in lines:
        assert "steps_per_execution=2" in line and "Fix: compile with steps_per_execution=1" in line


@pytest.mark.slurm
@pytest.mark.tensorflow
@pytest.mark.horovod
def test_keras3_jit_compile_under_horovod_is_refused_in_one_line(tmp_path: Path) -> None:
    lines = refused(tmp_path / "out", [*SRUN, "--mpi=pmix"], "horovod", "keras3_ctrain.py", "true")
    assert len(lines) == 2
    assert all(
        "XLA-compiled" in line and "Fix: compile with jit_compile=False" in line for line in lines
    )


@pytest.mark.slurm
@pytest.mark.tensorflow
@pytest.mark.horovod
def test_keras3_through_ctrain_api_in_every_mode(tmp_path: Path) -> None:
    workers = launched(tmp_path / "mw", "keras3_ctrain.py", starter=tuple(SRUN))
    ranks = launched(
        tmp_path / "hvd", "keras3_ctrain.py", starter=(*SRUN, "--mpi=pmix"), mode="horovod"
    )
    (one,) = launched(tmp_path / "one", "keras3_ctrain.py", mode="mirrored")
    assert [r["mode"] for r in workers + ranks + [one]] == ["multiworker"] * 2 + ["horovod"] * 2 + [
        "mirrored"
    ]
    for pair in (workers, ranks):
        assert pair[0]["weights"] == pair[1]["weights"]  # one model on every rank
        assert pair[0]["loss"] == pair[1]["loss"]  # metrics averaged over ranks
        assert pair[0]["optimizer"] == "SGD"  # the wrapper keeps the class name
    # the same global batches and learning rates: Horovod's averaged gradients equal the strategy's
    assert close(workers[0]["weights"], ranks[0]["weights"])
    assert close(workers[0]["lr"], ranks[0]["lr"])
    lr = ranks[0]["lr"]
    assert isinstance(lr, list) and lr[0] < lr[1] <= lr[2] == pytest.approx(0.04)  # warm-up
    assert one["lr"] == [] and (tmp_path / "one" / "model.keras").is_file()
