"""The job scripts' own logic, run by bash with fake srun, mpirun and scontrol on PATH: the step
they start, the signal they pass on, the requeue on exit code 75 and only then.

(The real runs under Slurm are in tests/integration/test_jobs_real.py.)
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from ctrain.names import JOB_MODES
from ctrain.settings_table import Settings
from ctrain.slurm import jobs
from ctrain.slurm.request import JobRequest
from ctrain.train.checkpoints import REQUEUE_EXIT_CODE
from tests.support.fake_job_programs import env
from tests.support.helpers import wait_for


def script(fakes: Path, mode: str = "single") -> Path:
    request = JobRequest(mode, ("python", "train.py", "--epochs", "3"), nodes=1, gpus_per_node=0)
    path = fakes / f"{mode}.sbatch"
    path.write_text(jobs.render(request))
    return path


def run(path: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(path)], env=environ, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("mode", JOB_MODES)
def test_the_step_runs_ctrain_exec_with_the_command(fakes: Path, mode: str) -> None:
    done = run(script(fakes, mode), env(fakes, FAKE_MODE="exit:0", CTRAIN_IMAGE="img x"))
    assert done.returncode == 0, done.stderr
    argv = (fakes / "argv").read_text().splitlines()
    assert (fakes / "ctrain").read_text().splitlines() == ["resolve", "img x"]
    tail = ["ctrain", "exec", "/pulled/img x", "--", "python", "train.py", "--epochs", "3"]
    assert argv[-len(tail) :] == tail
    launcher = {"horovod-srun": ["srun", "--mpi=pmix", "--kill-on-bad-exit=1"]}.get(
        mode, ["srun", "--kill-on-bad-exit=1"]
    )
    if mode == "horovod-mpirun":
        launcher = ["mpirun", "-np", "2", "--bind-to", "none"]
    assert argv[: len(launcher)] == launcher
    assert not (fakes / "scontrol").exists()


@pytest.mark.parametrize("mode", JOB_MODES)
def test_a_failed_resolve_stops_the_job_before_the_step(fakes: Path, mode: str) -> None:
    done = run(script(fakes, mode), env(fakes, FAKE_MODE="exit:0", FAKE_RESOLVE_EXIT="2"))
    assert done.returncode == 2
    assert not (fakes / "argv").exists()  # no rank started


def test_arguments_replace_the_default_command(fakes: Path) -> None:
    path = script(fakes)
    done = subprocess.run(
        ["bash", str(path), "python", "other.py", "a b"],
        env=env(fakes, FAKE_MODE="exit:0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert (fakes / "argv").read_text().splitlines()[-3:] == ["python", "other.py", "a b"]


def test_a_failure_is_passed_on_and_not_requeued(fakes: Path) -> None:
    done = run(script(fakes), env(fakes, FAKE_MODE="exit:3"))
    assert done.returncode == 3
    assert "ended with exit code 3" in done.stdout
    assert not (fakes / "scontrol").exists()


def test_the_requeue_exit_code_requeues_the_job(fakes: Path) -> None:
    done = run(script(fakes), env(fakes, FAKE_MODE=f"exit:{REQUEUE_EXIT_CODE}"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert (fakes / "scontrol").read_text().split() == ["requeue", "77"]


# The preflight (`ctrain job preflight`, its verdicts tested in tests/unit/slurm/test_faults.py):
# before the step, and after a step that failed on its own with the step's exit code.
def test_every_run_checks_the_nodes_before_the_step(fakes: Path) -> None:
    done = run(script(fakes), env(fakes, FAKE_MODE="exit:0"))
    assert done.returncode == 0, done.stderr
    assert (fakes / "preflight").read_text().split() == ["before"]  # not after a success


def test_a_node_that_fails_the_preflight_is_left_out_and_nothing_starts(fakes: Path) -> None:
    done = run(script(fakes), env(fakes, FAKE_MODE="exit:0", FAKE_BEFORE="requeue cn02,cn03"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (fakes / "argv").exists()  # no rank started
    words = (fakes / "scontrol").read_text().split()
    assert words == ["requeue", "77", "update", "JobId=77", "ExcNodeList=cn02,cn03"]
    assert "requeued without cn02,cn03" in done.stdout


def test_a_preflight_that_refuses_the_job_ends_it_with_its_code(fakes: Path) -> None:
    done = run(script(fakes), env(fakes, FAKE_MODE="exit:0", FAKE_BEFORE_EXIT="8"))
    assert done.returncode == 8
    assert not (fakes / "argv").exists()
    assert not (fakes / "scontrol").exists()


@pytest.mark.parametrize(
    ("after", "requeued"),
    [("requeue", ["requeue", "77"]), ("requeue cn02", ["requeue", "77", "update", "JobId=77",
     "ExcNodeList=cn02"]), ("end 1", None)],
)  # fmt: skip
def test_a_failed_step_is_requeued_or_ended_as_the_second_check_says(
    fakes: Path, after: str, requeued: list[str] | None
) -> None:
    done = run(script(fakes, "multiworker"), env(fakes, FAKE_MODE="exit:137", FAKE_AFTER=after))
    assert (fakes / "preflight").read_text().split() == ["before", "137"]
    if requeued is None:  # the code the check names: the first failing rank's
        assert done.returncode == 1
        assert "the training ended with exit code 1" in done.stdout
        assert not (fakes / "scontrol").exists()
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        assert (fakes / "scontrol").read_text().split() == requeued


def test_a_failing_second_check_ends_the_job_with_its_code(fakes: Path) -> None:
    done = run(script(fakes), env(fakes, FAKE_MODE="exit:137", FAKE_AFTER_EXIT="8"))
    assert done.returncode == 8
    assert not (fakes / "scontrol").exists()


def test_the_checkpointed_exit_code_skips_the_second_check(fakes: Path) -> None:
    run(script(fakes), env(fakes, FAKE_MODE=f"exit:{REQUEUE_EXIT_CODE}"))
    assert (fakes / "preflight").read_text().split() == ["before"]


@pytest.mark.parametrize("signals", [1, 2])
def test_usr2_is_passed_to_the_step_then_the_job_is_requeued(fakes: Path, signals: int) -> None:
    proc = subprocess.Popen(
        ["bash", str(script(fakes, "multiworker"))],
        env=env(fakes, FAKE_MODE="trap", FAKE_SIGNALS=str(signals)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for((fakes / "started").exists, "the step to start")
        usr2 = fakes / "usr2"
        for count in range(1, signals + 1):
            proc.send_signal(signal.SIGUSR2)
            wait_for(usr2.exists, "the step to get SIGUSR2")
            wait_for(lambda n=count: usr2.read_text().strip() == str(n), f"signal {count}", 10)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert out.count("SIGUSR2 received") == signals
    assert (fakes / "scontrol").read_text().split() == ["requeue", "77"]


def test_usr2_then_a_normal_end_is_not_requeued(fakes: Path) -> None:
    proc = subprocess.Popen(
        ["bash", str(script(fakes))],
        env=env(fakes, FAKE_MODE="trap", FAKE_EXIT="0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for((fakes / "started").exists, "the step to start")
        proc.send_signal(signal.SIGUSR2)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert not (fakes / "scontrol").exists()


# Requeue on the training's request, unless Slurm is ending the job: scancel (the job is
# cancelled) or scontrol requeue and the end of a preemption's grace time (Slurm requeues it
# itself). slurmctld says COMPLETING as soon as it ends a job. A preempted job (PreemptTime, still
# RUNNING) is requeued now where its partition's PreemptMode is REQUEUE, whatever the training's
# exit code but 0; the others wait for Slurm (below).
PREEMPTED = {"FAKE_JOB_STATE": "RUNNING", "FAKE_PREEMPT_TIME": "2026-01-01T00:00:30"}
STATES = {
    "RUNNING": {"FAKE_JOB_STATE": "RUNNING"},
    "SIGNALING": {"FAKE_JOB_STATE": "SIGNALING"},  # the moment Slurm signals a running job
    "COMPLETING": {"FAKE_JOB_STATE": "COMPLETING"},
    "CANCELLED": {"FAKE_JOB_STATE": "CANCELLED"},
    "unknown": {},  # scontrol printed nothing
    "scontrol fails": {"FAKE_JOB_STATE": "RUNNING", "FAKE_SHOW_EXIT": "1"},
    "preempted, REQUEUE": {**PREEMPTED, "FAKE_PREEMPT_MODE": "REQUEUE"},
    "preempted, GANG,REQUEUE": {**PREEMPTED, "FAKE_PREEMPT_MODE": "GANG,REQUEUE"},
    "preempted, grace over": {**PREEMPTED, "FAKE_JOB_STATE": "COMPLETING"},
}
ENDING = ("COMPLETING", "CANCELLED", "preempted, grace over")


@pytest.mark.parametrize(
    ("rc", "state"), [(rc, state) for rc in (REQUEUE_EXIT_CODE, 0, 3) for state in STATES]
)
def test_requeue_truth_table(fakes: Path, rc: int, state: str) -> None:
    done = run(script(fakes), env(fakes, FAKE_MODE=f"exit:{rc}", **STATES[state]))
    preempted = rc != 0 and state.startswith("preempted") and state not in ENDING
    requeued = preempted or (rc == REQUEUE_EXIT_CODE and state not in ENDING)
    if requeued:
        assert (fakes / "scontrol").read_text().split() == ["requeue", "77"]
    else:
        assert not (fakes / "scontrol").exists()
    expected = 0 if rc == REQUEUE_EXIT_CODE or preempted else rc
    assert done.returncode == expected, done.stdout + done.stderr
    ending = rc == REQUEUE_EXIT_CODE and state in ENDING
    assert ("not requeueing it from here" in done.stdout) == ending
    assert ("was preempted" in done.stdout) == preempted
    assert "waiting for Slurm" not in done.stdout


# A preempted job whose partition's PreemptMode is not REQUEUE (CANCEL), or not known to the
# script (preemption by QOS), or that may not be requeued (Slurm cancels it): the script ends
# neither too early (the job would end COMPLETED,
# Slurm's preemption lost) nor by a requeue of its own, but waits for Slurm's SIGTERM at the end
# of the grace time, or for a state other than RUNNING (polled every 10 s).
WAITING = {
    "CANCEL": {**PREEMPTED, "FAKE_PREEMPT_MODE": "CANCEL"},
    "QOS decides": {
        **PREEMPTED,
        "FAKE_PREEMPT_MODE": "REQUEUE",
        "FAKE_PREEMPT_TYPE": "preempt/qos",
    },
    "REQUEUE, --no-requeue": {**PREEMPTED, "FAKE_PREEMPT_MODE": "REQUEUE", "FAKE_REQUEUE": "0"},
}


@pytest.mark.parametrize(
    ("rc", "case"), [(rc, case) for rc in (REQUEUE_EXIT_CODE, 3) for case in WAITING]
)
def test_a_preempted_job_not_requeued_by_its_partition_waits_for_slurm(
    fakes: Path, rc: int, case: str
) -> None:
    log = fakes / "log"
    with log.open("w") as stdout:
        proc = subprocess.Popen(
            ["bash", str(script(fakes))],
            env=env(fakes, FAKE_MODE=f"exit:{rc}", **WAITING[case]),
            stdout=stdout,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: "waiting for Slurm" in log.read_text(), "the script to wait for Slurm")
        assert proc.poll() is None, log.read_text()  # it waits
        proc.send_signal(signal.SIGTERM)  # Slurm's, at the end of the grace time
        proc.wait(timeout=30)
    finally:
        proc.kill()
    out = log.read_text()
    assert proc.returncode == 0, out
    assert "waiting for Slurm to end it (EndTime=2026-01-01T00:01:00)" in out
    assert "not requeueing it from here" in out
    assert not (fakes / "scontrol").exists()


def test_a_waiting_preempted_job_ends_when_slurm_ends_it_without_a_signal(fakes: Path) -> None:
    waiting = {**WAITING["CANCEL"], "FAKE_JOB_STATE_LATER": "COMPLETING"}
    start = time.monotonic()
    done = run(script(fakes), env(fakes, FAKE_MODE=f"exit:{REQUEUE_EXIT_CODE}", **waiting))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "waiting for Slurm to end it" in done.stdout
    assert not (fakes / "scontrol").exists()
    assert time.monotonic() - start < 30  # one look at the state, 10 s after the first


@pytest.mark.parametrize(("state", "requeued"), [("RUNNING", True), ("COMPLETING", False)])
def test_sigterm_reaches_the_step_as_usr2(fakes: Path, state: str, requeued: bool) -> None:
    """srun would SIGKILL every task on a SIGTERM of its own: the step gets USR2 (the fake
    step dies of a SIGTERM, and counts USR2)."""
    proc = subprocess.Popen(
        ["bash", str(script(fakes, "multiworker"))],
        env=env(fakes, FAKE_MODE="trap", FAKE_JOB_STATE=state),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for((fakes / "started").exists, "the step to start")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "SIGTERM received, passing it to the training" in out
    assert (fakes / "usr2").read_text().strip() == "1"
    assert (fakes / "scontrol").exists() == requeued, out


def test_mpirun_gives_the_ranks_the_stop_budget_before_its_sigkill(fakes: Path) -> None:
    assert f"${{CTRAIN_STOP_BUDGET:-{Settings().stop_budget}}}" in jobs.template("horovod-mpirun")
    done = run(
        script(fakes, "horovod-mpirun"), env(fakes, FAKE_MODE="exit:0", CTRAIN_STOP_BUDGET="100")
    )
    assert done.returncode == 0, done.stderr
    argv = (fakes / "argv").read_text().splitlines()
    assert argv[5:8] == ["--mca", "odls_base_sigkill_timeout", "105"]
