"""The multi-node job scripts for real: every `jobs/*.sbatch` that takes --nodes, rendered with
--nodes 2 for partition `cluster` (the compute hosts of `make services NODES=3`,
docs/cluster.md) and run as written, one rank per node; the multiworker script signalled twice
runs three times and ends with the weights of an uninterrupted 2-node run.

Faults (issue 45): a rank killed mid-run (SIGKILL, as the OOM killer or a crash) has the job
requeued without its node, on the third host, where it resumes to the uninterrupted weights; a
host lost before a run (its slurmd and everything on it killed, which Slurm notices only after
SlurmdTimeout) fails the preflight and the job is requeued without it at once, or, with no fault
retries left, ends in one line; a script that raises on every rank is not requeued.

The job helpers are slurm_jobs.py's (the same scripts as test_jobs_real.py on the one-node
partition); job files live in ``cluster_tmp``, which every host shares.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain.launch.hostlist import expand_hostlist
from tests.conftest import CLUSTER_PARTITION, cluster_dir
from tests.support.helpers import REPO, wait_for
from tests.support.multinode import OPENMPI_ON_THE_CLUSTER
from tests.support.slurm_jobs import (
    EPOCHS,
    RESUMABLE,
    final_weights,
    holds,
    job_record,
    lines,
    log,
    render,
    submit,
    wait_done,
    wait_held,
)

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.cluster,
    pytest.mark.tensorflow,
    pytest.mark.timeout(900),
]
NODES = {"nodes": "2", "tasks_per_node": "1", "partition": CLUSTER_PARTITION}


@pytest.fixture
def submitted() -> Iterator[list[str]]:
    jobs: list[str] = []
    yield jobs
    for job in jobs:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)


def run_on_two_nodes(mode: str, workdir: Path, jobs: list[str], epochs: int) -> Path:
    """The job script of ``mode`` on 2 nodes to completion; its output directory."""
    out = workdir / "out"
    command = ["python", str(RESUMABLE), str(out), str(epochs)]
    script = render(mode, command, job_name=f"2n-{mode}", **NODES)
    job = submit(script, workdir, jobs, **OPENMPI_ON_THE_CLUSTER)
    record = wait_done(job, workdir)
    assert record["JobState"] == "COMPLETED", log(workdir)
    assert record["ExitCode"] == "0:0" and record["Restarts"] == "0"
    assert record["NumNodes"] == "2" and record["Partition"] == CLUSTER_PARTITION
    return out


@pytest.fixture(scope="module")
def uninterrupted() -> Iterator[Path]:
    """The multiworker job script on 2 nodes to completion: the reference for the requeue test."""
    jobs: list[str] = []
    with cluster_dir() as workdir:
        try:
            yield run_on_two_nodes("multiworker", workdir, jobs, EPOCHS)
        finally:
            for job in jobs:
                subprocess.run(["scancel", job], capture_output=True, timeout=30)


def test_multiworker_job_script_on_two_nodes(uninterrupted: Path) -> None:
    runs = lines(uninterrupted / "runs.jsonl")
    assert sorted(r["rank"] for r in runs) == [0, 1]  # type: ignore[type-var]
    assert all(r["mode"] == "multiworker" and r["end"] == "done" for r in runs)
    first, second = final_weights(uninterrupted, 2)
    assert first == second


@pytest.mark.horovod
@pytest.mark.parametrize(
    "mode", ["horovod-srun", pytest.param("horovod-mpirun", marks=pytest.mark.mpi)]
)
def test_horovod_job_script_on_two_nodes(
    mode: str, cluster_tmp: Path, submitted: list[str]
) -> None:
    out = run_on_two_nodes(mode, cluster_tmp, submitted, epochs=2)
    runs = lines(out / "runs.jsonl")
    assert sorted(r["rank"] for r in runs) == [0, 1]  # type: ignore[type-var]
    assert all(r["mode"] == "horovod" and r["end"] == "done" for r in runs)
    first, second = final_weights(out, 2)
    assert first == second
    assert "ended with exit code 0" in log(cluster_tmp)


def test_requeue_loop_on_two_nodes_resumes_exactly(
    uninterrupted: Path, cluster_tmp: Path, submitted: list[str]
) -> None:
    out = cluster_tmp / "out"
    command = ["python", str(RESUMABLE), str(out), str(EPOCHS), *holds("1:5", "2:3")]
    script = render("multiworker", command, job_name="2n-requeue", **NODES)
    job = submit(script, cluster_tmp, submitted, **OPENMPI_ON_THE_CLUSTER)
    nodes = []
    for restart in (0, 1):
        wait_held(job, out, restart, cluster_tmp)
        nodes.append(job_record(job)["NodeList"])
        subprocess.run(["scancel", "--signal=USR2", "--batch", job], check=True, timeout=30)
    record = wait_done(job, cluster_tmp)
    assert record["JobState"] == "COMPLETED", log(cluster_tmp)
    assert record["Restarts"] == "2" and record["NumNodes"] == "2", log(cluster_tmp)
    runs = lines(out / "runs.jsonl")
    assert sorted((r["restart"], r["end"]) for r in runs) == [
        (0, "exit 75"),
        (0, "exit 75"),
        (1, "exit 75"),
        (1, "exit 75"),
        (2, "done"),
        (2, "done"),
    ]
    assert [e["epoch"] for e in lines(out / "epochs.jsonl")] == list(range(EPOCHS))
    assert final_weights(out, 2) == final_weights(uninterrupted, 2), nodes


def nodes_of(record: dict[str, str]) -> list[str]:
    return expand_hostlist(record["NodeList"], "NodeList")


def test_a_rank_killed_mid_run_is_requeued_without_its_node_and_resumes_exactly(
    uninterrupted: Path, cluster_tmp: Path, submitted: list[str]
) -> None:
    out = cluster_tmp / "out"
    command = ["python", str(RESUMABLE), str(out), str(EPOCHS), *holds("1:5")]
    script = render("multiworker", command, job_name="2n-killed", **NODES)
    job = submit(script, cluster_tmp, submitted, **OPENMPI_ON_THE_CLUSTER)
    wait_held(job, out, 0, cluster_tmp)
    first = nodes_of(job_record(job))
    os.kill(int((out / "held-run0-rank1").read_text()), signal.SIGKILL)  # rank 1: first[1]
    record = wait_done(job, cluster_tmp)
    text = log(cluster_tmp, tail=0)
    assert record["JobState"] == "COMPLETED", text
    assert record["Restarts"] == "1" and record["ExcNodeList"] == first[1], text
    assert first[1] not in nodes_of(record) and len(nodes_of(record)) == 2
    assert f"{first[1]}: task 1 was ended by a signal (Killed), the first to end" in text
    assert f"job {job} requeued without {first[1]}" in text
    assert "fault retries used: 1 of 3" in text
    runs = lines(out / "runs.jsonl")
    assert sorted((r["restart"], r["end"]) for r in runs if r["restart"] == 1) == [
        (1, "done"),
        (1, "done"),
    ]
    assert final_weights(out, 2) == final_weights(uninterrupted, 2)


class Host:
    """A compute host that can be lost (its slurmd and everything on it killed, as a host that
    died: Slurm notices only after SlurmdTimeout, 300 s) and brought back (its slurmd started
    again, as after a reboot: the job it had is then let go)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def lose(self) -> None:
        pids = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True,
                              text=True, timeout=30, check=True).stdout.split()  # fmt: skip
        for pid in pids:
            os.kill(int(pid), signal.SIGKILL)

    def back(self) -> None:
        subprocess.run(  # only the hosts: `start` would also take back disk, the build cache
            ["bash", str(REPO / "scripts" / "services.sh"), "hosts"],
            env={**os.environ, "CTRAIN_SERVICES_NODES": "3"},
            capture_output=True,
            timeout=300,
            check=True,
        )


@pytest.fixture
def cn02() -> Iterator[Host]:
    host = Host("cn02")
    try:
        yield host
    finally:
        host.back()


def test_a_host_lost_before_a_run_is_left_out_at_once(
    cn02: Host, cluster_tmp: Path, submitted: list[str]
) -> None:
    cn02.lose()  # Slurm still takes it for up: the lowest-named idle hosts are cn01 and cn02
    script = render("multiworker", ["true"], job_name="2n-lost", **NODES)
    job = submit(script, cluster_tmp, submitted)
    wait_for(lambda: "requeued without" in log(cluster_tmp), "the requeue", timeout=120)
    cn02.back()  # the requeued job waits for the lost host to let go of it
    record = wait_done(job, cluster_tmp)
    text = log(cluster_tmp, tail=0)
    assert "run 0 on cn[01-02]" in text, "Slurm did not give the job the lost host"
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", text
    assert record["ExcNodeList"] == "cn02" and "cn02" not in nodes_of(record), text
    assert "cn02: FAIL did not answer" in text
    assert "cn02 failed the check: cn02 did not answer: requeueing the job without cn02" in text
    assert "ctrain: mode=" not in text.split("run 1 on")[0]  # no rank started in run 0


def test_a_spent_budget_ends_the_job_in_one_line(cluster_tmp: Path, submitted: list[str]) -> None:
    command = ["bash", "-c", 'if [ "$SLURM_PROCID" = 1 ]; then kill -9 $$; fi; sleep 5']
    script = render("multiworker", command, job_name="2n-spent", **NODES)
    job = submit(script, cluster_tmp, submitted, CTRAIN_FAULT_RETRIES="0")
    record = wait_done(job, cluster_tmp)
    text = log(cluster_tmp, tail=0)
    assert record["JobState"] == "FAILED" and record["Restarts"] == "0", text
    assert record["ExitCode"] == "8:0", text  # NodeFaultError's
    node = nodes_of(record)[1]
    assert (
        f"ctrain: error: {node}: task 1 was ended by a signal (Killed), the first to end; the "
        "job's fault retries are spent (fault retries used: 0 of 0) Fix: "
    ) in text


def test_a_script_that_raises_on_every_rank_is_not_requeued(
    cluster_tmp: Path, submitted: list[str]
) -> None:
    command = ["python", "-c", "raise RuntimeError('a bug of the script')"]
    job = submit(render("multiworker", command, job_name="2n-bug", **NODES), cluster_tmp, submitted)
    record = wait_done(job, cluster_tmp)
    text = log(cluster_tmp, tail=0)
    assert record["JobState"] == "FAILED" and record["ExitCode"] == "1:0", text
    assert record["Restarts"] == "0", text
    assert "its own error, which a rerun would repeat; not requeueing the job" in text
    assert not (cluster_tmp / ".ctrain").exists()
