"""Preemption by Slurm itself, for real: a rendered multiworker job (2 ranks) held at a known
step in a low partition is preempted by a job of the high partition that needs its cores
(scripts/services.sh: PreemptType=preempt/partition_prio; partitions low, GraceTime=30, and
low-cancel, GraceTime=10, both PriorityTier=1, and high, PriorityTier=2; docs/preemption.md).

Slurm sends every task SIGTERM, not the batch script; the chief checkpoints at that step and
every rank exits 75. Then, as the job's partition says:

- ``low`` (PreemptMode=REQUEUE): the job script requeues the job at once (Slurm would only at
  the end of the grace time, and never after a script that ended first), the preempting job
  starts, and the next run resumes at that step and ends with the weights of an uninterrupted
  run; requeued once (Restarts 1);
- ``low-cancel`` (PreemptMode=CANCEL): the job script waits for Slurm, which ends the job
  PREEMPTED when the grace time is over; never requeued.

The preempting job asks for the whole node (``--exclusive``), so it needs the held job's cores
on a node of any size; debug jobs it cannot preempt (PriorityTier=2 too) it waits for.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain.errors import REQUEUE_EXIT_CODE
from tests.support.helpers import wait_for
from tests.support.slurm_jobs import (
    RESUMABLE,
    final_weights,
    holds,
    job_record,
    lines,
    log,
    render,
    sh,
    submit,
    uninterrupted_weights,
    wait_done,
    wait_held,
)

EPOCHS = 2
HOLD = "1:5"  # epoch 2, step 6: the checkpoint below is after that step
AT_THE_SIGNAL = "ckpt-e000001-s000000006"
pytestmark = [pytest.mark.slurm, pytest.mark.tensorflow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> list[object]:
    """The final weights of the same training run through without a stop (2 ranks, srun)."""
    return uninterrupted_weights("multiworker", EPOCHS, tmp_path_factory)


@pytest.fixture
def preemptor() -> Iterator[list[str]]:
    """Submits the preempting job (one, on demand); cancels what is left of it after the test."""
    jobs: list[str] = []
    yield jobs
    for job in jobs:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)


def preempt(jobs: list[str]) -> str:
    """A job of the high partition that needs the whole node for a few seconds."""
    argv = ["sbatch", "--parsable", "-p", "high", "--exclusive", "-n", "1", "-t", "2"]
    argv += ["-J", "preemptor", "-o", "/dev/null", "--wrap", "sleep 5"]
    job = sh(argv).strip().split(";")[0]
    jobs.append(job)
    return job


def held_job(partition: str, tmp_path: Path, submitted: list[str]) -> tuple[str, Path]:
    """The multiworker job in ``partition``, every rank of its first run held at HOLD."""
    out = tmp_path / "out"
    command = ["python", str(RESUMABLE), str(out), str(EPOCHS), *holds(HOLD)]
    script = render("multiworker", command, job_name=f"preempt-{partition}", partition=partition)
    job = submit(script, tmp_path, submitted)
    wait_held(job, out, 0, tmp_path)
    return job, out


def first_run_over(out: Path) -> None:
    wait_for(lambda: len(lines(out / "runs.jsonl")) == 2, "both ranks of run 0 to end", 120, 0.2)


def test_preempted_under_requeue_is_requeued_once_and_resumes_exactly(
    tmp_path: Path,
    jobs_to_cancel: list[str],
    preemptor: list[str],
    uninterrupted: list[object],
) -> None:
    job, out = held_job("low", tmp_path, jobs_to_cancel)
    start = time.monotonic()
    high = preempt(preemptor)
    first_run_over(out)
    over = time.monotonic() - start
    wait_for(lambda: job_record(high)["JobState"] != "PENDING", "the preempting job to start", 120)
    print(
        f"\npreemption (REQUEUE): to both ranks' end {over:.1f} s, to the preempting job's"
        f" start {time.monotonic() - start:.1f} s"
    )
    record = wait_done(job, tmp_path)
    text = log(tmp_path, tail=0)
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", text[-4000:]
    assert record["PreemptTime"] == "None"  # the second run was not preempted
    assert text.count("was preempted at") == 1, text[-4000:]
    assert text.count("(PreemptMode=REQUEUE), the training ended with exit code 75") == 1
    assert text.count("requeueing it now") == 1
    assert "DUE TO PREEMPTION" not in text  # requeued before the end of the grace time
    assert "not requeueing" not in text and "checkpointed and asks to go on" not in text
    runs = lines(out / "runs.jsonl")
    assert sorted((r["restart"], r["end"]) for r in runs) == [
        (0, f"exit {REQUEUE_EXIT_CODE}"),
        (0, f"exit {REQUEUE_EXIT_CODE}"),
        (1, "done"),
        (1, "done"),
    ]
    assert [r["start"] for r in runs if r["restart"] == 1] == [[1, 6], [1, 6]]
    assert [e["epoch"] for e in lines(out / "epochs.jsonl")] == list(range(EPOCHS))
    assert final_weights(out, 2) == uninterrupted
    assert job_record(high)["JobState"] == "COMPLETED"


def test_preempted_under_cancel_checkpoints_and_stays_preempted(
    tmp_path: Path, jobs_to_cancel: list[str], preemptor: list[str]
) -> None:
    job, out = held_job("low-cancel", tmp_path, jobs_to_cancel)
    start = time.monotonic()
    high = preempt(preemptor)
    first_run_over(out)
    over = time.monotonic() - start
    record = wait_done(job, tmp_path)
    print(
        f"\npreemption (CANCEL): to both ranks' end {over:.1f} s, to the job's end"
        f" {time.monotonic() - start:.1f} s (GraceTime=10)"
    )
    text = log(tmp_path, tail=0)
    assert record["JobState"] == "PREEMPTED" and record["Restarts"] == "0", text[-4000:]
    assert record["ExitCode"] == "0:0", text[-4000:]  # the script ended at Slurm's SIGTERM
    assert text.count("(PreemptMode=CANCEL), the training ended with exit code 75") == 1
    assert text.count("waiting for Slurm to end it") == 1, text[-4000:]
    assert "DUE TO PREEMPTION" in text
    assert "requeueing it now" not in text and "checkpointed and asks to go on" not in text
    runs = lines(out / "runs.jsonl")
    assert sorted((r["rank"], r["end"]) for r in runs) == [
        (0, f"exit {REQUEUE_EXIT_CODE}"),
        (1, f"exit {REQUEUE_EXIT_CODE}"),
    ]
    assert sorted(p.name for p in (out / "ckpt").iterdir())[-1] == AT_THE_SIGNAL
    wait_for(lambda: job_record(high)["JobState"] == "COMPLETED", "the preempting job to end", 120)
