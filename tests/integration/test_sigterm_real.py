"""SIGTERM from Slurm, for real: every rank stops after the same step, the chief checkpoints,
every rank exits 75, and the next run ends with the weights of an uninterrupted one.

Each run holds every rank before step 6 of epoch 2 (train_resumable.py ``--hold-at 1:5``) until
the signal, so the checkpoint is at a known step. The ranks ending within the budget is seen
without a clock: a rank still running when its budget (CTRAIN_STOP_BUDGET) is spent ends
itself with 143, so exit 75 on every rank is the proof; the seconds from the signal to the
step's end are printed (``pytest -s``) for docs/preemption.md.

- ``scancel --signal=TERM`` of an srun step (what preemption, ``scontrol requeue`` and scancel
  send each task) in single, mirrored, multiworker and Horovod (``srun --mpi=pmix``) mode;
- the same to a multiworker script that does not use ctrain's stop handler: it ends (TensorFlow
  would have swallowed the signal) instead of training on until SIGKILL;
- ``scontrol requeue`` of a rendered multiworker job and of a horovod-mpirun one (mpirun, too,
  gets the SIGTERM): saved at the signal, requeued by Slurm once (never a second time by the job
  script), resumed to the same weights;
- ``scancel`` of one: saved at the signal, and cancelled (the job script does not requeue it).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from ctrain.errors import REQUEUE_EXIT_CODE
from tests.support.helpers import wait_for
from tests.support.real_runs import clean_env
from tests.support.slurm_jobs import (
    RANKS,
    RESUMABLE,
    final_weights,
    holds,
    lines,
    log,
    render,
    sh,
    srun_argv,
    submit,
    uninterrupted_weights,
    wait_done,
    wait_held,
)

EPOCHS = 2
HOLD = "1:5"  # epoch 2, step 6: the checkpoint below is after that step
AT_THE_SIGNAL = "ckpt-e000001-s000000006"
pytestmark = [pytest.mark.slurm, pytest.mark.tensorflow, pytest.mark.timeout(600)]


def run(argv: list[str], restart: int = 0) -> subprocess.CompletedProcess[str]:
    env = clean_env(TF_CPP_MIN_LOG_LEVEL="2", SLURM_RESTART_COUNT=str(restart))
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (SigCgt of /proc/PID/status)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def held_step(mode: str, name: str, out: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """An srun step of ``mode`` started and held at HOLD on every rank; its job id."""
    env = clean_env(TF_CPP_MIN_LOG_LEVEL="2")
    argv = srun_argv(mode, name, out, EPOCHS, "--hold-at", HOLD, *args)
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    markers = [out / f"held-run0-rank{rank}" for rank in range(RANKS[mode])]

    def held() -> bool:
        assert proc.poll() is None, f"the step ended before it held: {proc.communicate()[0]}"
        return all(m.exists() for m in markers)

    wait_for(held, f"every {mode} rank to hold", timeout=300, interval=0.2)
    job = sh(["squeue", "-h", "-n", name, "-o", "%i"]).strip()
    assert job, f"no job named {name}"
    return proc, job


def pids(out: Path, ranks: int) -> list[int]:
    return [int((out / f"held-run0-rank{rank}").read_text()) for rank in range(ranks)]


def term_and_wait(proc: subprocess.Popen[str], job: str, what: str) -> tuple[int, str]:
    start = time.monotonic()
    sh(["scancel", "--signal=TERM", job])  # every task of the step, as Slurm's own end does
    try:
        output, _ = proc.communicate(timeout=240)
    finally:
        proc.kill()
    print(f"\n{what}: SIGTERM to the step's end {time.monotonic() - start:.1f} s")
    return proc.returncode, output


@pytest.mark.parametrize(
    "mode",
    ["single", "mirrored", "multiworker", pytest.param("horovod", marks=pytest.mark.horovod)],
)
def test_sigterm_checkpoints_every_rank_at_the_step_and_resumes_exactly(
    mode: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out, ranks = tmp_path / "out", RANKS[mode]
    name = f"sigterm-{mode}-{tmp_path.name}"
    proc, job = held_step(mode, name, out)
    # ctrain's handler holds SIGTERM on every rank, TensorFlow's multiworker runtime's taken back
    assert all(catches_sigterm(pid) for pid in pids(out, ranks))
    code, output = term_and_wait(proc, job, mode)
    assert code == REQUEUE_EXIT_CODE, output[-4000:]
    assert output.count("got SIGTERM: finishing this step") == ranks, output[-4000:]
    assert "ending now" not in output  # no rank spent its budget
    runs = lines(out / "runs.jsonl")
    assert sorted((r["rank"], r["end"]) for r in runs) == [  # type: ignore[type-var]
        (rank, f"exit {REQUEUE_EXIT_CODE}") for rank in range(ranks)
    ]
    assert sorted(p.name for p in (out / "ckpt").iterdir())[-1] == AT_THE_SIGNAL

    done = run(srun_argv(mode, f"{name}-resumed", out, EPOCHS), restart=1)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    resumed = [r for r in lines(out / "runs.jsonl") if r["restart"] == 1]
    assert [r["start"] for r in resumed] == [[1, 6]] * ranks
    assert final_weights(out, ranks) == uninterrupted_weights(mode, EPOCHS, tmp_path_factory)


def test_a_script_without_the_stop_handler_ends_on_sigterm(tmp_path: Path) -> None:
    """TensorFlow's multi-worker runtime installs a SIGTERM handler that only records the
    signal; ctrain.distributed.init gives SIGTERM its default back."""
    out = tmp_path / "out"
    proc, job = held_step("multiworker", f"sigterm-plain-{tmp_path.name}", out, "--no-preemption")
    assert not any(catches_sigterm(pid) for pid in pids(out, 2))
    code, output = term_and_wait(proc, job, "multiworker without the stop handler")
    assert code not in (0, REQUEUE_EXIT_CODE), output[-4000:]
    assert not (out / "runs.jsonl").exists()  # no rank went on to the end of fit
    assert not (out / "ckpt").exists()


# The job script's modes and the mode of their ranks. Under mpirun, mpirun too gets Slurm's
# SIGTERM and ends its ranks after odls_base_sigkill_timeout, which the script sets past the stop
# budget; it then lingers until Slurm's KillWait, so its batch script says nothing more.
JOB_MODES = {
    "multiworker": "multiworker",
    "horovod-mpirun": "horovod",
}


@pytest.mark.parametrize(
    "job_mode", ["multiworker", pytest.param("horovod-mpirun", marks=[pytest.mark.horovod,
                                                                     pytest.mark.mpi])],
)  # fmt: skip
def test_scontrol_requeue_of_a_job_saves_at_the_signal(
    job_mode: str,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    jobs_to_cancel: list[str],
) -> None:
    out = tmp_path / "out"
    command = ["python", str(RESUMABLE), str(out), str(EPOCHS), *holds(HOLD)]
    script = render(job_mode, command, job_name=f"sigterm-requeue-{job_mode}")
    # A short budget: mpirun waits it and 5 s more, twice, before it lets go (Slurm's KillWait,
    # 30 s, would end it first); the ranks here save in a second or two.
    job = submit(script, tmp_path, jobs_to_cancel, CTRAIN_STOP_BUDGET="8")
    wait_held(job, out, 0, tmp_path)
    start = time.monotonic()
    sh(["scontrol", "requeue", job])  # SIGTERM to the batch script and to every task

    def first_run_over() -> bool:
        return len(lines(out / "runs.jsonl")) == 2

    wait_for(first_run_over, "both ranks of run 0 to end", timeout=120, interval=0.2)
    print(f"\nscontrol requeue ({job_mode}): to both ranks' end {time.monotonic() - start:.1f} s")
    record = wait_done(job, tmp_path)
    text = log(tmp_path, tail=0)
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", text[-4000:]
    assert "SIGTERM received, passing it to the training" in text
    assert "requeueing job" not in text  # Slurm requeued it; the script did not again
    if job_mode == "multiworker":
        assert text.count("(JobState=COMPLETING): not requeueing it from here") == 1, text[-4000:]
    runs = lines(out / "runs.jsonl")
    assert sorted((r["restart"], r["end"]) for r in runs) == [  # type: ignore[type-var]
        (0, f"exit {REQUEUE_EXIT_CODE}"),
        (0, f"exit {REQUEUE_EXIT_CODE}"),
        (1, "done"),
        (1, "done"),
    ]
    assert [r["start"] for r in runs if r["restart"] == 1] == [[1, 6], [1, 6]]
    reference = uninterrupted_weights(JOB_MODES[job_mode], EPOCHS, tmp_path_factory)
    assert final_weights(out, 2) == reference


def test_scancel_of_a_multiworker_job_saves_at_the_signal_and_stays_cancelled(
    tmp_path: Path, jobs_to_cancel: list[str]
) -> None:
    out = tmp_path / "out"
    command = ["python", str(RESUMABLE), str(out), str(EPOCHS), *holds(HOLD)]
    job = submit(
        render("multiworker", command, job_name="sigterm-cancel"), tmp_path, jobs_to_cancel
    )
    wait_held(job, out, 0, tmp_path)
    sh(["scancel", job])  # SIGTERM to the batch script and to every task, then KillWait
    record = wait_done(job, tmp_path)
    text = log(tmp_path, tail=0)
    assert record["JobState"] == "CANCELLED" and record["Restarts"] == "0", text[-4000:]
    assert text.count("(JobState=COMPLETING): not requeueing it from here") == 1, text[-4000:]
    assert "requeueing job" not in text
    runs = lines(out / "runs.jsonl")
    assert sorted((r["rank"], r["end"]) for r in runs) == [  # type: ignore[type-var]
        (0, f"exit {REQUEUE_EXIT_CODE}"),
        (1, f"exit {REQUEUE_EXIT_CODE}"),
    ]
    assert sorted(p.name for p in (out / "ckpt").iterdir())[-1] == AT_THE_SIGNAL
