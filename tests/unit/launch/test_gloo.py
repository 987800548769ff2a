"""Horovod over Gloo (launch/gloo.py): when it is used, where the rendezvous runs, what each rank
tells Horovod and the server rank 0 starts, and the launches it refuses with their fixes."""

from __future__ import annotations

import pytest

from ctrain.errors import LaunchError
from ctrain.launch.gloo import (
    Rendezvous,
    ctrain_plans_gloo,
    horovod_environment,
    on_gloo_alone,
    plan_rendezvous,
    server_command,
)
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.modes import Placement
from ctrain.names import Mode
from tests.support.environs import hydra, proxies_step, slurm_step

NO_NODES = (
    "Horovod over Gloo across nodes under hydra needs the nodes of the launch, and only Slurm "
    "says them (Hydra started by srun: mpiexec -launcher slurm)"
)
NO_NODES_FIX = (
    "start Hydra's proxies with Slurm (mpiexec -launcher slurm, or I_MPI_HYDRA_BOOTSTRAP=slurm), "
    "or launch with srun --mpi=pmix / Open MPI's mpirun"
)


# sbatch -N2 --ntasks=4: the batch script's variables, which Hydra's ssh bootstrap hands every
# rank (SLURM_NODEID is the batch host's, whichever node the rank runs on).
BATCH_SCRIPT = {
    "SLURM_JOB_ID": "91",
    "SLURM_JOB_NODELIST": "cn[01-02]",
    "SLURM_NODELIST": "cn[01-02]",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_NTASKS": "4",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
}
# salloc -N2's interactive step: a one-task step on the first node, outside any srun step.
INTERACTIVE_STEP = slurm_step(
    nodes="cn01", job="91", step="interactive", SLURM_JOB_NODELIST="cn[01-02]", SLURM_NTASKS=None
)


def job(env: dict[str, str], host: str = "cn02") -> JobEnv:
    return JobEnv.from_environ(env, host)


@pytest.mark.parametrize(
    ("mode", "size", "launcher_env", "expected"),
    [
        (Mode.HOROVOD, 2, hydra(0, 2, 0, 2), True),
        (Mode.HOROVOD, 1, hydra(0, 1, 0, 1), False),  # mpiexec -n 1: no world to meet
        (Mode.MULTIWORKER, 2, hydra(0, 2, 0, 2), False),
        (Mode.HOROVOD, 2, {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, False),
    ],
)
def test_ctrain_plans_gloo(
    mode: Mode, size: int, launcher_env: dict[str, str], expected: bool
) -> None:
    assert ctrain_plans_gloo(mode, job(launcher_env), size) is expected


HOROVODRUN_GLOO = {  # what horovodrun --gloo gives a rank (horovod_environment's variables)
    "HOROVOD_CONTROLLER": "gloo",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR": "10.0.0.1",
    "HOROVOD_RANK": "1",
    "HOROVOD_SIZE": "2",
    "HOROVOD_LOCAL_RANK": "1",
    "HOROVOD_LOCAL_SIZE": "2",
}
OPENMPI = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}


@pytest.mark.parametrize(
    ("mode", "size", "launcher_env", "expected"),
    [
        (Mode.HOROVOD, 2, HOROVODRUN_GLOO, True),  # horovodrun --gloo started the rank
        (Mode.HOROVOD, 2, hydra(0, 2, 0, 2), True),  # ctrain plans the rendezvous
        (Mode.HOROVOD, 1, hydra(0, 1, 0, 1), False),
        (Mode.MULTIWORKER, 2, HOROVODRUN_GLOO, False),
        (Mode.HOROVOD, 2, OPENMPI, False),
        # a user's HOROVOD_CONTROLLER=gloo alone: Horovod's CPU operations stay MPI
        (Mode.HOROVOD, 2, {**OPENMPI, "HOROVOD_CONTROLLER": "gloo"}, False),
        (Mode.HOROVOD, 2, {**slurm_step(), "HOROVOD_CONTROLLER": "gloo"}, False),
    ],
)
def test_on_gloo_alone(mode: Mode, size: int, launcher_env: dict[str, str], expected: bool) -> None:
    assert on_gloo_alone(mode, job(launcher_env), size) is expected


def test_rendezvous_across_nodes_is_on_the_first_node_of_the_step() -> None:
    place = Placement(3, 4, 1, 2, "hydra")
    meet = plan_rendezvous(job({**proxies_step(1), **hydra(3, 4, 1, 2)}), place, 24000)
    assert meet == Rendezvous("cn01", 24000, ("cn01", "cn02"), 2, 1)
    assert meet.explain() == {"addr": "cn01", "port": 24000, "hosts": ["cn01", "cn02"]}


def test_rendezvous_on_one_node_is_this_host() -> None:
    place = Placement(1, 2, 1, 2, "hydra")
    meet = plan_rendezvous(job(hydra(1, 2, 1, 2), "laptop"), place, 20063)
    assert meet == Rendezvous("laptop", 20063, ("laptop",), 2, 0)


@pytest.mark.parametrize(("port", "refused"), [(65534, False), (65535, False), (65536, True)])
def test_rendezvous_port_up_to_65535(port: int, refused: bool) -> None:
    place = Placement(0, 2, 0, 2, "hydra")
    if not refused:
        assert plan_rendezvous(job(hydra(0, 2, 0, 2)), place, port).port == port
        return
    with pytest.raises(LaunchError) as caught:
        plan_rendezvous(job(hydra(0, 2, 0, 2)), place, port)
    assert (caught.value.message, caught.value.fix) == (
        "port 65536 is above 65535",
        "lower CTRAIN_PORT_BASE",
    )


def test_uneven_ranks_per_node_are_refused_with_the_fix() -> None:
    place = Placement(0, 3, 0, 2, "hydra")
    with pytest.raises(LaunchError) as caught:
        plan_rendezvous(job({**proxies_step(0), **hydra(0, 3, 0, 2)}), place, 24000)
    assert (caught.value.message, caught.value.fix) == (
        "Horovod over Gloo needs the same number of ranks on every node; 3 ranks on 2 nodes "
        "with 2 on this one",
        "give every node as many ranks (mpiexec -ppn N, flux run --tasks-per-node=N)",
    )


@pytest.mark.parametrize(
    "slurm_env", [{}, BATCH_SCRIPT, INTERACTIVE_STEP], ids=["no-slurm", "batch", "interactive"]
)
def test_across_nodes_without_a_step_of_one_proxy_per_node_is_refused(
    slurm_env: dict[str, str],
) -> None:
    """Hydra's ssh bootstrap: the ranks carry no Slurm step that says the nodes of the launch."""
    place = Placement(2, 4, 0, 2, "hydra")
    with pytest.raises(LaunchError) as caught:
        plan_rendezvous(job({**slurm_env, **hydra(2, 4, 0, 2)}), place, 24000)
    assert (caught.value.message, caught.value.fix) == (NO_NODES, NO_NODES_FIX)


def test_horovod_environment_is_what_horovodrun_gloo_sets() -> None:
    meet = Rendezvous("cn01", 24127, ("cn01", "cn02", "cn03"), 2, 2)
    assert horovod_environment(meet, Placement(5, 6, 1, 2, "pals")) == {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "cn01",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "24127",
        "HOROVOD_HOSTNAME": "cn03",
        "HOROVOD_RANK": "5",
        "HOROVOD_SIZE": "6",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2",
        "HOROVOD_CROSS_RANK": "2",
        "HOROVOD_CROSS_SIZE": "3",
    }


def test_server_command() -> None:
    meet = Rendezvous("cn01", 24127, ("cn01", "cn02", "cn03"), 2, 0)
    assert server_command("/venv/bin/python", meet, 6, 4711) == [
        "/venv/bin/python",
        "-m",
        "ctrain.train.rendezvous",
        "--port",
        "24127",
        "--hosts",
        "cn01,cn02,cn03",
        "--local-size",
        "2",
        "--size",
        "6",
        "--watch-pid",
        "4711",
    ]
