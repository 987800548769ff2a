"""Every launcher a site uses, as `ctrain launch --explain --json` reads it: mode, rank, world
size, local rank, local size and GPU, one row per (launcher, rank).

The environments are what each launcher sets for a rank: Open MPI's mpirun and srun --mpi=pmix
(seen here), MPICH 4.0's Hydra on a workstation and under Slurm with its proxies started by srun
(`mpiexec.hydra -launcher slurm`, seen here: SLURM_PROCID and SLURM_STEP_NUM_TASKS then count
proxies, one per node), HPE Cray PALS (ALCF's documentation: PALS_* and Cray PMI's PMI_*) and
Flux (flux-environment(7)). Under Hydra, PALS and Flux, Horovod runs on Gloo (launch/gloo.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from ctrain.errors import LaunchError
from ctrain.launch.gloo import horovod_environment
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.modes import Placement, placement
from ctrain.launch.plan import LaunchOptions, make_plan
from ctrain.names import Mode
from tests.support.environs import hydra, hydra_under_srun, proxies_step, slurm_step

GPUS = ("0", "1")  # the node's GPUs every rank sees, as without --gpus-per-task


def hydra_workstation(rank: int) -> dict[str, str]:
    return {**hydra(rank, 2, rank, 2), "HYDI_CONTROL_FD": "7"}


def pals(rank: int, nodes: int = 1) -> dict[str, str]:
    """2 ranks per node under PBS on a Cray EX system."""
    size = str(2 * nodes)
    return {
        "PBS_JOBID": "123.polaris",
        "PALS_APID": "7f1c",
        "PALS_RANKID": str(rank),
        "PALS_LOCAL_RANKID": str(rank % 2),
        "PALS_LOCAL_SIZE": "2",
        "PALS_NODEID": str(rank // 2),
        "PALS_DEPTH": "1",
        "PMI_RANK": str(rank),
        "PMI_SIZE": size,
        "PMI_LOCAL_RANK": str(rank % 2),
        "PMI_LOCAL_SIZE": "2",
    }


def flux(rank: int, nodes: int = 1) -> dict[str, str]:
    """flux run -N nodes -n 2*nodes; Flux says no local size."""
    size = str(2 * nodes)
    return {
        "FLUX_JOB_ID": "f2Xa",
        "FLUX_URI": "local:///tmp/flux/local-0",
        "FLUX_TASK_RANK": str(rank),
        "FLUX_TASK_LOCAL_ID": str(rank % 2),
        "FLUX_JOB_SIZE": size,
        "FLUX_JOB_NNODES": str(nodes),
        "PMI_RANK": str(rank),
        "PMI_SIZE": size,
        "PMI_FD": "9",
    }


def openmpi(rank: int) -> dict[str, str]:
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % 2),
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "PMIX_RANK": str(rank),
    }


def srun_pmix(rank: int) -> dict[str, str]:
    node = rank // 2
    step = slurm_step(rank, 4, "cn[01-02]", per_node="2(x2)", local=rank % 2, node=node, job="91")
    return {**step, "PMIX_RANK": str(rank)}


LAUNCHES = {
    "mpirun": openmpi,
    "srun-pmix": srun_pmix,
    "hydra-workstation": hydra_workstation,
    "hydra-srun-proxies": hydra_under_srun,
    "pals": pals,
    "flux": flux,
}
# launch -> (source, mode, world size, local size, Gloo rendezvous) for every rank; each rank's
# local rank is rank % 2 and it is pinned to GPU local rank (two GPUs, two ranks per node).
EXPECTED: dict[str, tuple[str, str, int, int, bool]] = {
    "mpirun": ("openmpi", "horovod", 4, 2, False),
    "srun-pmix": ("slurm", "multiworker", 4, 2, False),
    "hydra-workstation": ("hydra", "horovod", 2, 2, True),
    "hydra-srun-proxies": ("hydra", "horovod", 4, 2, True),
    "pals": ("pals", "horovod", 2, 2, True),
    "flux": ("flux", "horovod", 2, 2, True),
}


def explain(env: dict[str, str], host: str = "cn01", mode: str = "auto") -> dict[str, Any]:
    job = JobEnv.from_environ(env, host)
    return make_plan(job, LaunchOptions(mode=mode), env, GPUS).explain()


def test_every_launch_has_a_row() -> None:
    assert set(LAUNCHES) == set(EXPECTED)


ROWS = [(launch, rank) for launch in sorted(LAUNCHES) for rank in range(EXPECTED[launch][2])]


@pytest.mark.parametrize(("launch", "rank"), ROWS)
def test_each_launcher_gives_each_rank_its_place(launch: str, rank: int) -> None:
    source, mode, size, local_size, gloo = EXPECTED[launch]
    got = explain(LAUNCHES[launch](rank))
    assert (got["rank_source"], got["mode"]) == (source, mode)
    assert (got["rank"], got["world_size"]) == (rank, size)
    assert (got["local_rank"], got["local_size"]) == (rank % 2, local_size)
    assert got["gpus"] == [GPUS[rank % 2]]
    assert (got["rendezvous"] is not None) == gloo
    assert (got["env"]["set"].get("HOROVOD_CONTROLLER") == "gloo") == gloo


def test_the_plan_says_when_horovod_runs_on_gloo_alone() -> None:
    """Under ctrain's own rendezvous, and under horovodrun --gloo (whose rendezvous is its own):
    the MPI check reads this, not the HOROVOD_* variables."""
    for launch, (_, _, _, _, rendezvous) in EXPECTED.items():
        env = LAUNCHES[launch](0)
        plan = make_plan(JobEnv.from_environ(env, "cn01"), LaunchOptions(), env, GPUS)
        assert plan.gloo == rendezvous, launch
    horovodrun_gloo = {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": "cn01",
        "HOROVOD_GLOO_RENDEZVOUS_PORT": "40000",
        "HOROVOD_RANK": "1",
        "HOROVOD_SIZE": "2",
        "HOROVOD_LOCAL_RANK": "1",
        "HOROVOD_LOCAL_SIZE": "2",
    }
    job = JobEnv.from_environ(horovodrun_gloo, "cn01")
    plan = make_plan(job, LaunchOptions(), horovodrun_gloo, GPUS)
    assert (plan.place.source, plan.mode, plan.gloo) == ("horovod", Mode.HOROVOD, True)
    assert plan.rendezvous is None


def test_hydra_under_srun_is_not_read_from_slurm() -> None:
    """The proxies' SLURM_PROCID (the node) and a 2-task step would make two ranks 0 of 2."""
    ranks = [explain(hydra_under_srun(rank))["rank"] for rank in range(4)]
    assert ranks == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "env", [hydra_workstation(1), hydra_under_srun(3), pals(2, nodes=2), flux(1, nodes=2)], ids=str
)
def test_multiworker_on_request_under_other_launchers_is_refused_across_nodes_only(
    env: dict[str, str],
) -> None:
    single_node = "HYDI_CONTROL_FD" in env
    if single_node:
        assert explain(env, mode="multiworker")["tf_config"] is not None
    else:
        with pytest.raises(LaunchError, match="needs Slurm's node list"):
            explain(env, mode="multiworker")


def test_gloo_rendezvous_is_on_rank_0s_node_and_tells_horovod_every_place() -> None:
    plans = [explain(hydra_under_srun(rank), host=f"cn0{rank // 2 + 1}") for rank in range(4)]
    meets = {json_key(p["rendezvous"]) for p in plans}
    assert len(meets) == 1  # every rank meets at one address
    meet = plans[0]["rendezvous"]
    assert meet["addr"] == "cn01" and meet["hosts"] == ["cn01", "cn02"]
    assert 20000 <= meet["port"] < 32000
    env = plans[3]["env"]["set"]
    assert env["HOROVOD_RANK"] == "3" and env["HOROVOD_SIZE"] == "4"
    assert (env["HOROVOD_LOCAL_RANK"], env["HOROVOD_LOCAL_SIZE"]) == ("1", "2")
    assert (env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"]) == ("1", "2")
    assert env["HOROVOD_HOSTNAME"] == "cn02"
    assert env["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "cn01"


def json_key(meet: dict[str, Any]) -> tuple[str, int]:
    return meet["addr"], meet["port"]


def test_gloo_on_a_workstation_meets_on_this_host() -> None:
    meet = explain(hydra_workstation(0), host="laptop")["rendezvous"]
    assert meet["addr"] == "laptop" and meet["hosts"] == ["laptop"]


@pytest.mark.parametrize("env", [pals(0, nodes=2), flux(3, nodes=2)], ids=["pals", "flux"])
def test_gloo_across_nodes_without_slurm_is_refused_with_the_fix(env: dict[str, str]) -> None:
    with pytest.raises(LaunchError, match="needs the nodes of the launch") as caught:
        explain(env)
    assert "-launcher slurm" in caught.value.fix


def test_flux_across_nodes_places_ranks_from_its_node_count() -> None:
    """Flux sets no local size: with its tasks spread evenly, size / nodes rounded up."""
    job = JobEnv.from_environ(flux(3, nodes=2), "cn02")
    assert placement(Mode.HOROVOD, job) == Placement(3, 4, 1, 2, "flux")
    odd = {**flux(2, nodes=2), "FLUX_JOB_SIZE": "3", "PMI_SIZE": "3", "FLUX_TASK_LOCAL_ID": "0"}
    assert placement(Mode.HOROVOD, JobEnv.from_environ(odd, "cn02")).local_size == 2


def test_gloo_needs_as_many_ranks_on_every_node() -> None:
    env = {**proxies_step(0), **hydra(0, 3, 0, 2)}
    with pytest.raises(LaunchError, match="same number of ranks on every node"):
        explain(env)


def test_gloo_port_beyond_the_last_port_is_refused() -> None:
    env = hydra_workstation(0)
    job = JobEnv.from_environ(env, "laptop")
    with pytest.raises(LaunchError, match="above 65535"):
        make_plan(job, LaunchOptions(port_base=65500), env, ())


def test_one_rank_under_hydra_runs_one_process_without_a_rendezvous() -> None:
    got = explain(hydra(0, 1, 0, 1))
    assert got["mode"] == "mirrored" and got["rendezvous"] is None  # one process, two GPUs


def test_horovod_environment_names_what_horovodrun_sets() -> None:
    plan = make_plan(
        JobEnv.from_environ(hydra_workstation(1), "h"), LaunchOptions(), hydra_workstation(1), ()
    )
    assert plan.rendezvous is not None
    got = horovod_environment(plan.rendezvous, plan.place)
    assert set(got) == {
        "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS", "HOROVOD_GLOO_RENDEZVOUS_ADDR",
        "HOROVOD_GLOO_RENDEZVOUS_PORT", "HOROVOD_HOSTNAME", "HOROVOD_RANK", "HOROVOD_SIZE",
        "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE",
    }  # fmt: skip
