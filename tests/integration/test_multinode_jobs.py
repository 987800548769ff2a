"""The multi-node job scripts for real: every `jobs/*.sbatch` that takes --nodes, rendered with
--nodes 2 for partition `cluster` (the compute hosts of `make services NODES=3`,
docs/cluster.md) and run as written, one rank per node; the multiworker script signalled twice
runs three times and ends with the weights of an uninterrupted 2-node run.

The job helpers are slurm_jobs.py's (the same scripts as test_jobs_real.py on the one-node
partition); job files live in ``cluster_tmp``, which every host shares.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CLUSTER_PARTITION, cluster_dir

from .multinode import OPENMPI_ON_THE_CLUSTER
from .slurm_jobs import (
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
