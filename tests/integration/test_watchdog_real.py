"""The stall watchdog with real TensorFlow and Horovod under Open MPI's mpirun (2 ranks, no
Slurm): a rank stopped (SIGSTOP, as a node swapping to death) leaves the other waiting in its
allreduce; that rank's watchdog ends it with 124 and one line, and mpirun ends the step. A rank
that is slow but goes on making steps is never ended.

What it cannot prove: the same under srun's and the other launchers' own ways of ending a step
(a rank that exits non-zero ends the step under each: test_outside_scripts.py, test_jobs_real.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from ctrain.errors import STALLED_EXIT_CODE
from tests.support.helpers import CTRAIN
from tests.support.real_runs import BIN, SCRIPTS, clean_env

RESUMABLE = SCRIPTS / "train_resumable.py"
MPIRUN = ["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "none", "--tag-output"]
pytestmark = [
    pytest.mark.tensorflow,
    pytest.mark.horovod,
    pytest.mark.mpi,
    pytest.mark.timeout(600),
]


def train(
    out: Path, stall_timeout: int, *args: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [*MPIRUN, CTRAIN, "launch", "--mode", "horovod", "--",
         str(BIN / "python"), str(RESUMABLE), str(out), *args],
        capture_output=True, text=True, timeout=420,
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="2", CTRAIN_STALL_TIMEOUT=str(stall_timeout)),
    )  # fmt: skip
    return done, time.monotonic() - started


def test_a_stopped_rank_leaves_the_other_stuck_and_its_watchdog_ends_the_step(
    tmp_path: Path,
) -> None:
    done, _ = train(tmp_path, 15, "3", "--stall-at", "1:5", "--stall-rank", "1")
    assert done.returncode != 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert (tmp_path / "stalled-rank1").is_file(), done.stderr[-3000:]
    # Rank 0's line (mpirun tags each line [1,RANK]). Rank 1 may say it too, where mpirun,
    # ending the job, sends it SIGCONT before SIGKILL: its own watchdog then finds it overdue.
    said = [line for line in done.stderr.splitlines() if "no training step ended for" in line]
    assert any(line.startswith("[1,0]<stderr>:") for line in said), done.stderr[-3000:]
    for line in said:  # (mpirun may append the next chunk's tag to a line)
        assert "(CTRAIN_STALL_TIMEOUT=15): this rank is stuck" in line, line
        assert f"; ending it with {STALLED_EXIT_CODE}" in line, line
    # It never trained past the stopped step: no final weights.
    assert not list(tmp_path.glob("final-rank*.json"))


def test_a_slow_rank_that_makes_steps_is_never_ended(tmp_path: Path) -> None:
    # Every step takes 1 s more on rank 1 (and so on rank 0, waiting for it): 2 epochs of 16
    # steps sleep 32 s, longer than the timeout of 20 s, far above a step's wait and the first
    # step's compilation: only a wait between two steps counts.
    done, took = train(tmp_path, 20, "2", "--slow-rank", "1", "--slow", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no training step ended" not in done.stderr
    assert took > 32  # the run outlasted the timeout
    finals = [json.loads((tmp_path / f"final-rank{r}.json").read_text()) for r in (0, 1)]
    assert finals[0]["weights"] == finals[1]["weights"]
