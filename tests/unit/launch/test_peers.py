"""The peer-loss watch's plan (launch/peers.py): which launches arm it (a truth table over
launcher, mode and world size), where rank 0 listens, and what the rank's environment gets."""

from __future__ import annotations

import itertools

import pytest

from ctrain.launch.jobenv import JobEnv
from ctrain.launch.keras import STARTUP_HOOK
from ctrain.launch.peers import watches_peers
from ctrain.launch.plan import LaunchOptions, make_plan
from ctrain.launch.ports import PEER_WATCH_SLOT, PORT_BLOCK, RENDEZVOUS_SLOT, PortWindow
from ctrain.names import ENV_LAUNCH_PEER_WATCH, Mode
from ctrain.util.shipped import shipped_dir
from tests.support.environs import hydra, slurm_step

# What each launcher marks a rank with (jobenv.LAUNCHERS), inside an srun step of 2 tasks.
MARKS: dict[str | None, dict[str, str]] = {
    None: {},
    "openmpi": {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
    "horovod": {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"},
    "hydra": hydra(1, 2, 1, 2),
    "pals": {"PALS_RANKID": "1", "PMI_SIZE": "2"},
    "flux": {"FLUX_TASK_RANK": "1", "FLUX_JOB_SIZE": "2"},
    "pmix": {"PMIX_RANK": "1"},
    "pmi": {"PMI_RANK": "1", "PMI_SIZE": "2"},
}
WATCHED = {("pmix", Mode.HOROVOD, True, 2), ("pmi", Mode.HOROVOD, True, 2)}


@pytest.mark.parametrize(
    ("launcher", "mode", "in_step", "size"),
    list(itertools.product(MARKS, Mode, (True, False), (1, 2))),
)
def test_only_horovod_ranks_srun_starts_with_pmi_watch_their_peers(
    launcher: str | None, mode: Mode, in_step: bool, size: int
) -> None:
    step = slurm_step(1, 2, "cn[01-02]", per_node="1(x2)", local=0, node=1)
    env = {**(step if in_step else {}), **MARKS[launcher]}
    job = JobEnv.from_environ(env, "cn02")
    assert job.mpi.launcher == launcher
    assert watches_peers(mode, job, size) == ((launcher, mode, in_step, size) in WATCHED)


def test_the_watch_and_the_rendezvous_take_the_last_ports_of_the_step_block() -> None:
    window = PortWindow(20000)
    block = window.block("91", "3")
    first = 20000 + block * PORT_BLOCK
    assert window.step_port("91", "3", RENDEZVOUS_SLOT) == first + PORT_BLOCK - 1
    assert window.step_port("91", "3", PEER_WATCH_SLOT) == first + PORT_BLOCK - 2


def test_every_rank_gets_rank_0s_node_and_port_and_the_start_up_hook() -> None:
    env = {
        **slurm_step(1, 2, "cn[01-02]", per_node="1(x2)", local=0, node=1, job="91", step="3"),
        "PMIX_RANK": "1",
    }
    plan = make_plan(JobEnv.from_environ(env, "cn02"), LaunchOptions(mode="horovod"), env, ())
    port = PortWindow(20000).step_port("91", "3", PEER_WATCH_SLOT)
    assert plan.env_set[ENV_LAUNCH_PEER_WATCH] == f"cn01:{port}"
    assert plan.env_set["PYTHONPATH"] == str(shipped_dir(STARTUP_HOOK))
    assert plan.ports == ()  # no rank but rank 0 listens


def test_a_launch_that_ends_its_ranks_itself_gets_no_watch() -> None:
    env = {**slurm_step(1, 2), "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    plan = make_plan(JobEnv.from_environ(env, "vm"), LaunchOptions(mode="horovod"), env, ())
    assert ENV_LAUNCH_PEER_WATCH not in plan.env_set
    assert "PYTHONPATH" not in plan.env_set
