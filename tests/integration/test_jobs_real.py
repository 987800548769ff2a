"""The job scripts for real on the local Slurm: each mode rendered by `ctrain job render` and run
to completion with the host runtime; a multiworker job signalled twice runs three times
(SLURM_RESTART_COUNT 0, 1, 2), loses no completed epoch and ends with exactly the weights of an
uninterrupted run; the multiworker script through the Docker runtime with the CPU image.

The node is shared with the other tests: every wait is bounded, and a job left behind by a
failed test is cancelled.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.images import ci_cpu_image
from tests.support.real_runs import BIN
from tests.support.slurm_jobs import (
    EPOCHS,
    RESUMABLE,
    final_weights,
    holds,
    job_argv,
    job_env,
    lines,
    log,
    render,
    sh,
    submit,
    wait_done,
    wait_held,
)

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.tensorflow,
    pytest.mark.builds("cpu-image"),
    pytest.mark.timeout(900),
]


def run_to_completion(mode: str, workdir: Path, submitted: list[str], epochs: int = EPOCHS) -> Path:
    out = workdir / "out"
    command = ["python", str(RESUMABLE), str(out), str(epochs)]
    if mode == "single":  # through `ctrain job submit`, which prints the job id
        argv = job_argv("submit", mode, command, job_name=mode)
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=60, env=job_env(), cwd=workdir
        )
        assert done.returncode == 0, done.stderr
        job = done.stdout.strip()
        submitted.append(job)
    else:
        job = submit(render(mode, command, job_name=mode), workdir, submitted)
    record = wait_done(job, workdir)
    assert record["JobState"] == "COMPLETED", log(workdir)
    assert record["ExitCode"] == "0:0" and record["Restarts"] == "0"
    return out


CASES = [
    pytest.param("single", 1, id="single"),
    pytest.param("mirrored", 1, id="mirrored"),
    pytest.param("horovod-srun", 2, id="horovod-srun", marks=pytest.mark.horovod),
    pytest.param(
        "horovod-mpirun", 2, id="horovod-mpirun", marks=[pytest.mark.horovod, pytest.mark.mpi]
    ),
]


@pytest.mark.parametrize(("mode", "ranks"), CASES)
def test_job_script_runs_to_completion(
    mode: str, ranks: int, tmp_path: Path, jobs_to_cancel: list[str]
) -> None:
    out = run_to_completion(mode, tmp_path, jobs_to_cancel, epochs=2)
    runs = lines(out / "runs.jsonl")
    expected_mode = "horovod" if mode.startswith("horovod") else mode
    assert sorted(r["rank"] for r in runs) == list(range(ranks))  # type: ignore[type-var]
    assert all(r["mode"] == expected_mode and r["end"] == "done" for r in runs)
    weights = final_weights(out, ranks)
    assert all(w == weights[0] for w in weights)
    assert [e["epoch"] for e in lines(out / "epochs.jsonl")] == [0, 1]
    text = log(tmp_path)
    assert "run 0 on" in text and "ended with exit code 0" in text


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The multiworker job script run to completion: the reference for the requeue test."""
    workdir = tmp_path_factory.mktemp("uninterrupted")
    submitted: list[str] = []
    try:
        yield run_to_completion("multiworker", workdir, submitted)
    finally:
        for job in submitted:
            subprocess.run(["scancel", job], capture_output=True, timeout=30)


def test_multiworker_job_script_runs_to_completion(uninterrupted: Path) -> None:
    runs = lines(uninterrupted / "runs.jsonl")
    assert sorted(r["rank"] for r in runs) == [0, 1]  # type: ignore[type-var]
    assert all(r["mode"] == "multiworker" and r["end"] == "done" for r in runs)
    first, second = final_weights(uninterrupted, 2)
    assert first == second


def test_requeue_loop_resumes_exactly(
    uninterrupted: Path, tmp_path: Path, jobs_to_cancel: list[str]
) -> None:
    out = tmp_path / "out"
    command = ["python", str(RESUMABLE), str(out), str(EPOCHS), *holds("1:5", "2:3")]
    job = submit(render("multiworker", command, job_name="requeue"), tmp_path, jobs_to_cancel)
    for restart in (0, 1):
        wait_held(job, out, restart, tmp_path)
        sh(["scancel", "--signal=USR2", "--batch", job])  # what Slurm does before the limit
    record = wait_done(job, tmp_path)
    assert record["JobState"] == "COMPLETED", log(tmp_path)
    assert record["Restarts"] == "2", log(tmp_path)
    text = log(tmp_path, tail=0)

    runs = lines(out / "runs.jsonl")
    by_restart = {k: [r for r in runs if r["restart"] == k] for k in (0, 1, 2)}
    assert len(runs) == 6 and all(len(v) == 2 for v in by_restart.values()), runs
    assert {r["job"] for r in runs} == {job}
    assert [sorted({str(r["end"]) for r in by_restart[k]}) for k in (0, 1, 2)] == [
        ["exit 75"],
        ["exit 75"],
        ["done"],
    ]
    # each run starts where the previous one stopped, both ranks at the same step
    starts = [{tuple(r["start"]) for r in by_restart[k]} for k in (0, 1, 2)]  # type: ignore[arg-type]
    assert all(len(s) == 1 for s in starts) and starts[0] == {(0, 0)}
    checkpoints = sorted(p.name for p in (out / "ckpt").iterdir())
    assert checkpoints[-1] == f"ckpt-e{EPOCHS:06d}-s000000000"
    # no completed epoch lost or repeated, and the count goes on to the requested total
    epochs = lines(out / "epochs.jsonl")
    assert [e["epoch"] for e in epochs] == list(range(EPOCHS)), epochs
    assert sorted({int(e["restart"]) for e in epochs}) == [0, 1, 2]  # type: ignore[call-overload]
    assert text.count("requeueing job") == 2 and text.count("SIGUSR2 received") == 2
    # bit for bit the uninterrupted run's weights, on both ranks
    assert final_weights(out, 2) == final_weights(uninterrupted, 2)


@pytest.mark.docker
def test_multiworker_job_script_through_docker_requeued_once(
    uninterrupted: Path, tmp_path: Path, jobs_to_cancel: list[str]
) -> None:
    image = ci_cpu_image()
    assert image is not None
    shutil.copy(RESUMABLE, tmp_path / "train.py")  # docker binds the working directory
    out = tmp_path / "out"
    command = ["python", str(tmp_path / "train.py"), str(out), str(EPOCHS), *holds("1:5")]
    script = render("multiworker", command, runtime="docker", image=image, job_name="docker")
    # This machine sets OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE, which change numpy's kernels (and so
    # the bits of the data): the container gets them too, or it computes other weights.
    blas = tmp_path / "blas.env"
    settings = {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")}
    blas.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    job = submit(script, tmp_path, jobs_to_cancel, CTRAIN_ENV_FILE=str(blas))
    wait_held(job, out, 0, tmp_path)
    sh(["scancel", "--signal=USR2", "--batch", job])  # through srun, docker and tini
    record = wait_done(job, tmp_path)
    assert record["JobState"] == "COMPLETED", log(tmp_path)
    assert record["Restarts"] == "1", log(tmp_path)
    runs = lines(out / "runs.jsonl")
    assert sorted((r["restart"], r["end"]) for r in runs) == [  # type: ignore[type-var]
        (0, "exit 75"),
        (0, "exit 75"),
        (1, "done"),
        (1, "done"),
    ]
    assert all(r["mode"] == "multiworker" for r in runs)
    assert all(r["python"] != str(BIN / "python") for r in runs)  # the image's, not this venv's
    assert [e["epoch"] for e in lines(out / "epochs.jsonl")] == list(range(EPOCHS))
    assert final_weights(out, 2) == final_weights(uninterrupted, 2)
