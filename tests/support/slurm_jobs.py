"""Rendered job scripts on the local Slurm: ``ctrain job render|submit`` for this one-node,
CPU-only machine, sbatch, squeue and scontrol with bounded waits, the logs and the per-rank
records the training scripts leave; train_resumable.py as an srun step, and its weights run
through without a stop (one run per mode and session). One home for every test that submits a
job.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN, wait_for
from tests.support.real_runs import BIN, SCRIPTS, clean_env

RESUMABLE = SCRIPTS / "train_resumable.py"
EPOCHS = 5
JOB_TIMEOUT = 420  # one job, all its runs, on a busy 2-core machine


def job_env(**extra: str) -> dict[str, str]:
    return clean_env(
        TF_CPP_MIN_LOG_LEVEL="2",
        OMPI_ALLOW_RUN_AS_ROOT="1",  # mpirun as root, as tests run here
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        **extra,
    )


def job_argv(action: str, mode: str, command: list[str], **options: str) -> list[str]:
    """``ctrain job render|submit`` for this one-node, CPU-only Slurm."""
    layout = {"--nodes": "1", "--gpus-per-node": "0", "--cpus-per-task": "1", "--mem": "2G"}
    layout |= {"--time": "10", "--signal-seconds": "30", "--runtime": "host"}
    if mode not in ("single", "mirrored"):
        layout["--tasks-per-node"] = "2"
    layout |= {f"--{k.replace('_', '-')}": v for k, v in options.items()}
    options_argv = [a for kv in layout.items() for a in kv]
    return [CTRAIN, "job", action, mode, *options_argv, "--", *command]


def render(mode: str, command: list[str], **options: str) -> str:
    argv = job_argv("render", mode, command, **options)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=job_env())
    assert done.returncode == 0, done.stderr
    return done.stdout


def sh(argv: list[str], timeout: float = 30) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


def state(job: str) -> str:
    """squeue's state and reason for the job; empty once it has left the queue."""
    return sh(["squeue", "-h", "-j", job, "-o", "%T %r"]).strip()


def job_record(job: str) -> dict[str, str]:
    text = sh(["scontrol", "-o", "show", "job", job])
    return dict(word.split("=", 1) for word in text.split() if "=" in word)


HELD_SINCE: dict[str, int] = {}


def release_if_held(job: str, status: str) -> None:
    """A requeued job waits 2 minutes (BeginTime) before it may start again: let it go sooner,
    but only once the previous run has fully ended: its steps gone, and the clock past the
    second in which the test first saw it pending (slurmd refuses a credential made in or
    before the second the previous run's credential was revoked, and that was before)."""
    if not (status.startswith("PENDING") and "BeginTime" in status):
        HELD_SINCE.pop(job, None)
        return
    seen = HELD_SINCE.setdefault(job, int(time.time()))
    if int(time.time()) <= seen or sh(["squeue", "-h", "-s", "-j", job]).strip():
        return
    subprocess.run(
        ["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True, timeout=30
    )


def submit(script: str, workdir: Path, submitted: list[str], **extra: str) -> str:
    path = workdir / "job.sbatch"
    path.write_text(script)
    done = subprocess.run(
        ["sbatch", "--parsable", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=workdir,
        env=job_env(**extra),
    )
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    submitted.append(job)
    return job


def wait_done(job: str, workdir: Path, timeout: float = JOB_TIMEOUT) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while status := state(job):
        release_if_held(job, status)
        assert time.monotonic() < deadline, f"job {job} still {status}:\n{log(workdir)}"
        time.sleep(0.5)
    return job_record(job)


def log(workdir: Path, tail: int = 4000) -> str:
    """The job's log (the end of it, for failure messages; tail=0: all of it)."""
    return "\n".join(p.read_text()[-tail:] for p in sorted(workdir.glob("*.out")))


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def final_weights(out: Path, ranks: int) -> list[object]:
    return [json.loads((out / f"final-rank{r}.json").read_text())["weights"] for r in range(ranks)]


RANKS = {"single": 1, "mirrored": 1, "multiworker": 2, "horovod": 2}  # srun_argv's tasks by mode


def srun_argv(mode: str, name: str, out: Path, epochs: int, *args: str) -> list[str]:
    """``train_resumable.py OUT EPOCHS ARGS`` through ``ctrain launch --mode MODE`` as an srun
    step named ``name`` in the debug partition: RANKS[mode] tasks, PMIx for Horovod."""
    srun = ["srun", "-p", "debug", "-n", str(RANKS[mode]), "-t", "5", "-J", name]
    srun += ["--kill-on-bad-exit=1", *(["--mpi=pmix"] if mode == "horovod" else [])]
    command = [str(BIN / "python"), str(RESUMABLE), str(out), str(epochs), *args]
    return [*srun, CTRAIN, "launch", "--mode", mode, "--", *command]


UNINTERRUPTED: dict[tuple[str, int], list[object]] = {}


def uninterrupted_weights(
    mode: str, epochs: int, tmp_path_factory: pytest.TempPathFactory
) -> list[object]:
    """The final weights of ``train_resumable.py OUT EPOCHS`` run through without a stop, as
    ``srun_argv``'s step of ``mode``: one run per mode and session, for every test that stops and
    resumes that training under any launcher (the launcher does not change the training)."""
    if (mode, epochs) not in UNINTERRUPTED:
        out = tmp_path_factory.mktemp(f"uninterrupted-{mode}")
        argv = srun_argv(mode, f"uninterrupted-{mode}", out, epochs)
        env = clean_env(TF_CPP_MIN_LOG_LEVEL="2")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        UNINTERRUPTED[mode, epochs] = final_weights(out, RANKS[mode])
    return UNINTERRUPTED[mode, epochs]


def holds(*steps: str) -> list[str]:
    """train_resumable.py's arguments that hold run N before ``steps[N]`` until SIGUSR2."""
    return [arg for step in steps for arg in ("--hold-at", step)]


def wait_held(job: str, out: Path, restart: int, workdir: Path, ranks: int = 2) -> None:
    """Until every rank of the run ``restart`` of the job holds, waiting for the signal."""
    markers = [out / f"held-run{restart}-rank{rank}" for rank in range(ranks)]

    def held() -> bool:
        status = state(job)
        assert status, f"job {job} ended before run {restart} held:\n{log(workdir)}"
        release_if_held(job, status)
        return all(m.exists() for m in markers)

    wait_for(held, f"run {restart} of job {job} to hold", timeout=JOB_TIMEOUT, interval=0.5)
