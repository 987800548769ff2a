"""The mode decision as a full truth table: launch scenario x request x visible GPUs."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from ctrain.errors import LaunchError
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.modes import Placement, choose_mode, placement
from ctrain.names import Mode
from tests.support.environs import JOB, STEP2, slurm_step

OMPI2 = {
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "PMIX_RANK": "1",
}
SCENARIOS: dict[str, dict[str, str]] = {
    "plain": {},
    "batch1": {**JOB, "SLURM_NTASKS": "1", "SLURM_PROCID": "0"},
    "batch4": {**JOB, "SLURM_NTASKS": "4", "SLURM_PROCID": "0", "SLURM_TASKS_PER_NODE": "4"},
    "srun1": slurm_step(),
    "srun2": STEP2,
    "srun2_pmix": {**STEP2, "PMIX_RANK": "1"},
    "srun2_pmi": {**STEP2, "PMI_RANK": "1", "PMI_SIZE": "2"},
    # mpirun inside a batch allocation: Slurm's variables are the batch script's (PROCID 0).
    "mpirun2": {**JOB, "SLURM_NTASKS": "2", "SLURM_PROCID": "0", **OMPI2},
    "mpirun1": {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"},
    "horovodrun2": {
        "HOROVOD_RANK": "1",
        "HOROVOD_SIZE": "2",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2",
    },
}
S, M, W, H, X = "single", "mirrored", "multiworker", "horovod", "error"
ONE_PROCESS = {"auto": (S, S, M), "single": S, "mirrored": M, "multiworker": W, "horovod": H}
# expected[scenario][request]: one value, or one per visible GPU count (0, 1, 2)
EXPECTED: dict[str, dict[str, str | tuple[str, str, str]]] = {
    "plain": ONE_PROCESS,
    "batch1": ONE_PROCESS,
    "batch4": {"auto": X, "single": S, "mirrored": M, "multiworker": X, "horovod": X},
    "srun1": ONE_PROCESS,
    "srun2": {"auto": W, "single": X, "mirrored": X, "multiworker": W, "horovod": X},
    "srun2_pmix": {"auto": W, "single": X, "mirrored": X, "multiworker": W, "horovod": H},
    "srun2_pmi": {"auto": W, "single": X, "mirrored": X, "multiworker": W, "horovod": H},
    "mpirun2": {"auto": H, "single": X, "mirrored": X, "multiworker": W, "horovod": H},
    "mpirun1": ONE_PROCESS,
    "horovodrun2": {"auto": H, "single": X, "mirrored": X, "multiworker": W, "horovod": H},
}
REQUESTS = ("auto", "single", "mirrored", "multiworker", "horovod")


def job(scenario: str) -> JobEnv:
    return JobEnv.from_environ(SCENARIOS[scenario], hostname="vm")


def test_table_covers_every_scenario_and_request() -> None:
    assert set(EXPECTED) == set(SCENARIOS)
    assert all(set(row) == set(REQUESTS) for row in EXPECTED.values())


@pytest.mark.parametrize(
    ("scenario", "request_", "gpus"), list(itertools.product(SCENARIOS, REQUESTS, (0, 1, 2)))
)
def test_choose_mode(scenario: str, request_: str, gpus: int) -> None:
    cell = EXPECTED[scenario][request_]
    expected = cell[gpus] if isinstance(cell, tuple) else cell
    if expected == X:
        with pytest.raises(LaunchError) as caught:
            choose_mode(request_, job(scenario), gpus)
        assert caught.value.fix
    else:
        assert choose_mode(request_, job(scenario), gpus) is Mode(expected)


def test_batch_script_with_tasks_says_use_srun() -> None:
    with pytest.raises(LaunchError, match="SLURM_NTASKS=4") as caught:
        choose_mode("auto", job("batch4"), 0)
    assert "srun" in caught.value.fix


@pytest.mark.parametrize(
    ("scenario", "mode", "expected"),
    [
        ("plain", Mode.SINGLE, Placement(0, 1, 0, 1, "none")),
        ("srun2", Mode.MULTIWORKER, Placement(1, 2, 1, 2, "slurm")),
        ("srun2_pmix", Mode.MULTIWORKER, Placement(1, 2, 1, 2, "slurm")),
        ("srun2_pmix", Mode.HOROVOD, Placement(1, 2, 1, 2, "pmix")),
        ("srun2_pmi", Mode.HOROVOD, Placement(1, 2, 1, 2, "pmi")),
        # mpirun: SLURM_PROCID is 0 on every rank; MPI's variables are right
        ("mpirun2", Mode.HOROVOD, Placement(1, 2, 1, 2, "openmpi")),
        ("mpirun2", Mode.MULTIWORKER, Placement(1, 2, 1, 2, "openmpi")),
        ("horovodrun2", Mode.HOROVOD, Placement(1, 2, 1, 2, "horovod")),
        ("batch1", Mode.SINGLE, Placement(0, 1, 0, 1, "none")),
    ],
)
def test_placement(scenario: str, mode: Mode, expected: Placement) -> None:
    assert placement(mode, job(scenario)) == expected


def test_placement_refuses_local_rank_beyond_node_tasks() -> None:
    env = slurm_step(1, 2, local=2)
    with pytest.raises(LaunchError, match="local rank 2"):
        placement(Mode.MULTIWORKER, JobEnv.from_environ(env, "vm"))


# Two nodes, unequal: `srun -N 2 -n 4` gave n1 three tasks and n2 one (block order). The
# (rank, node id, local id) of every task, and the launcher variables each one sees:
TWO_NODE_TASKS = [(0, 0, 0), (1, 0, 1), (2, 0, 2), (3, 1, 0)]
LAUNCHERS: dict[str, tuple[Mode, Callable[[int], dict[str, str]]]] = {
    "slurm": (Mode.MULTIWORKER, lambda rank: {}),
    "pmix": (Mode.HOROVOD, lambda rank: {"PMIX_RANK": str(rank)}),
    "pmi": (Mode.HOROVOD, lambda rank: {"PMI_RANK": str(rank), "PMI_SIZE": "4"}),
}


@pytest.mark.parametrize("source", list(LAUNCHERS))
@pytest.mark.parametrize(("rank", "nodeid", "localid"), TWO_NODE_TASKS)
def test_placement_across_two_unequal_nodes(
    source: str, rank: int, nodeid: int, localid: int
) -> None:
    """The local rank is the rank on this node and the local size is this node's task count,
    under srun and under srun --mpi=pmix/pmi (Horovod), whatever the global rank."""
    mode, launcher_vars = LAUNCHERS[source]
    env = slurm_step(
        rank, 4, "n[1-2]", per_node="3,1", local=localid, node=nodeid, job="90",
        SLURM_JOB_NODELIST=None, **launcher_vars(rank),
    )  # fmt: skip
    local_size = (3, 1)[nodeid]
    expected = Placement(rank, 4, localid, local_size, source)
    assert placement(mode, JobEnv.from_environ(env, f"n{nodeid + 1}")) == expected
