"""``ctrain job status|logs|cancel|fetch`` on the local Slurm, after ``ctrain job submit``: a job
of a few seconds followed to its end and its outputs copied, a sleeping job left running by
Ctrl-C on its follower and then cancelled, and a job of the test user that root's ctrain refuses
to cancel. Seconds in all: the jobs run a shell command with the host runtime, no image. Every
subprocess has a timeout, and every job left behind is cancelled.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN, ctrain_env, run_ctrain, wait_for
from tests.support.slurm_jobs import job_argv, job_env, sh
from tests.support.users import TEST_USER

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]
TIMEOUT = 60  # each ctrain command; a job here waits only for a free core


def env_for(tmp_path: Path) -> dict[str, str]:
    """The job environment with the ledger under ``tmp_path``."""
    return job_env(XDG_STATE_HOME=str(tmp_path / "state"))


def ctrain(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_ctrain(*args, env=env_for(tmp_path), cwd=tmp_path, timeout=TIMEOUT)


def submit(tmp_path: Path, name: str, script: str, submitted: list[str]) -> str:
    argv = job_argv("submit", "single", ["bash", "-c", script], job_name=name)
    done = ctrain(tmp_path, *argv[1:])
    assert done.returncode == 0, done.stderr
    submitted.append(done.stdout.strip())
    return submitted[-1]


def status(tmp_path: Path, *ids: str) -> list[dict[str, object]]:
    done = ctrain(tmp_path, "job", "status", "--json", *ids)
    assert done.returncode == 0, done.stderr
    shown: list[dict[str, object]] = json.loads(done.stdout)
    return shown


def test_a_job_followed_to_its_end(tmp_path: Path, jobs_to_cancel: list[str]) -> None:
    job = submit(
        tmp_path, "tracked", "echo hi; echo w > weights; sleep 3; echo bye", jobs_to_cancel
    )
    (first,) = status(tmp_path, job)
    assert first["state"] in ("PENDING", "CONFIGURING", "RUNNING"), first

    followed = ctrain(tmp_path, "job", "logs", "--follow", job)
    assert followed.returncode == 0, followed.stderr
    assert "\nhi\nbye\n" in followed.stdout
    assert followed.stderr.splitlines()[-1] == f"job {job} ended: COMPLETED, exit 0:0"

    (record,) = status(tmp_path)  # no id: the ledger's jobs
    log = tmp_path / f"tracked-{job}.out"
    assert record == {**record, "job_id": job, "state": "COMPLETED", "log": str(log)}
    assert record["workdir"] == str(tmp_path) and record["nodes"] and record["restarts"] == 0
    assert followed.stdout == log.read_text() == ctrain(tmp_path, "job", "logs", job).stdout

    ended = ctrain(tmp_path, "job", "cancel", job)
    assert (ended.returncode, ended.stdout) == (0, f"job {job} has already ended: COMPLETED\n")

    fetched = ctrain(tmp_path, "job", "fetch", job, "--to", str(tmp_path / "copy"))
    assert fetched.returncode == 0, fetched.stderr
    assert (tmp_path / "copy" / "weights").read_text() == "w\n"
    assert (tmp_path / "copy" / log.name).read_text() == log.read_text()
    here = ctrain(tmp_path, "job", "fetch", job)  # the job's directory is this one
    assert here.returncode == 0 and "already here" in here.stderr, here.stderr


def test_ctrl_c_leaves_the_job_and_cancel_stops_it(
    tmp_path: Path, jobs_to_cancel: list[str], test_user: object
) -> None:
    job = submit(tmp_path, "sleeper", "echo started; sleep 120", jobs_to_cancel)
    others = ["runuser", "-u", TEST_USER, "--", "sbatch", "--parsable", "--chdir=/tmp"]
    other = sh([*others, "--output=/dev/null", "--time=2", "--wrap=sleep 60"]).strip()
    jobs_to_cancel.append(other)
    followed = tmp_path / "followed.txt"  # a file, not a tty: printed as it comes (flushed)
    with (
        followed.open("w") as out,
        subprocess.Popen(
            [CTRAIN, "job", "logs", "-f", job],
            env=ctrain_env(env_for(tmp_path)),
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal
        ) as follower,
    ):
        wait_for(
            lambda: "started\n" in followed.read_text(), "the log", timeout=TIMEOUT, interval=0.2
        )
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=TIMEOUT)
    assert follower.returncode == 130, err
    assert f"stopped following job {job}'s log (SIGINT); the job keeps running" in err

    refused = ctrain(tmp_path, "job", "cancel", other)
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    assert refused.stderr.startswith(f"ctrain: error: job {other} is {TEST_USER}'s, not yours")
    assert refused.stderr.count("\n") == 1 and " Fix: " in refused.stderr

    cancelled = ctrain(tmp_path, "job", "cancel", job)
    assert cancelled.stdout == f"job {job} cancelled (it was RUNNING)\n", cancelled.stderr
    wait_for(
        lambda: status(tmp_path, job)[0]["state"] == "CANCELLED",
        "the job to be cancelled",
        timeout=TIMEOUT,
        interval=0.5,
    )
    assert status(tmp_path, other)[0]["state"] in ("PENDING", "RUNNING")
