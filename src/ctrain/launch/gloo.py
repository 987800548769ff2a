"""Horovod over Gloo for ranks that a non-Open MPI launcher started (MPICH's Hydra, Cray PALS,
Flux): where the rendezvous runs and what each rank tells Horovod. Pure decisions.

ctrain's Horovod is built against Open MPI. Under another MPI family's launcher its MPI_Init would
start every rank as a world of one, so Horovod runs on its Gloo controller there, which needs no
MPI at all: rank 0 starts Horovod's own HTTP rendezvous server (``ctrain.train.rendezvous``), and
every rank gets the variables horovodrun would give it.
"""

from __future__ import annotations

from typing import NamedTuple

from ctrain.errors import LaunchError
from ctrain.launch.jobenv import HOROVODRUN_GLOO, JobEnv
from ctrain.launch.modes import Placement
from ctrain.launch.ports import refuse_above_highest
from ctrain.names import Mode

GLOO_LAUNCHERS = frozenset({"hydra", "pals", "flux"})
"""Launchers under which Horovod's Open MPI cannot start: Horovod runs on Gloo there."""


class Rendezvous(NamedTuple):
    """Horovod's Gloo rendezvous for this launch, and this rank's node in it."""

    addr: str  # rank 0's node, where its server listens
    port: int
    hosts: tuple[str, ...]  # every node of the launch, in rank order
    local_size: int  # ranks on each node (the same on all)
    node: int  # this rank's node: Horovod's cross rank

    def explain(self) -> dict[str, object]:
        return {"addr": self.addr, "port": self.port, "hosts": list(self.hosts)}


def ctrain_plans_gloo(mode: Mode, job: JobEnv, size: int) -> bool:
    """Whether ctrain plans Horovod's Gloo rendezvous for this launch (and rank 0 serves it):
    Horovod mode, several ranks, started by a launcher of another MPI family. A rank that
    horovodrun --gloo started runs on Gloo too, with horovodrun's rendezvous (``on_gloo_alone``)."""
    return mode is Mode.HOROVOD and size > 1 and job.mpi.launcher in GLOO_LAUNCHERS


def on_gloo_alone(mode: Mode, job: JobEnv, size: int) -> bool:
    """Whether this Horovod rank runs on Gloo alone, without MPI: horovodrun --gloo started it, or
    ctrain plans Gloo for it (``ctrain_plans_gloo``). The one place that says so: the MPI check
    (launch/mpicheck.py) takes it from here. A user's HOROVOD_CONTROLLER=gloo alone is not Gloo
    alone: Horovod's CPU operations stay MPI (its default), so MPI_Init still runs."""
    started = job.mpi.launcher == HOROVODRUN_GLOO
    return mode is Mode.HOROVOD and (started or ctrain_plans_gloo(mode, job, size))


def _nodes(job: JobEnv, place: Placement) -> tuple[tuple[str, ...], int]:
    """Every node of the launch and this rank's index among them."""
    if place.size == place.local_size:
        return (job.hostname,), 0
    slurm = job.slurm
    one_per_node = slurm.in_step and slurm.step_num_tasks == len(slurm.nodes)
    if one_per_node and slurm.nodeid is not None and slurm.nodeid < len(slurm.nodes):
        if place.local_size * len(slurm.nodes) == place.size:
            return slurm.nodes, slurm.nodeid
        raise LaunchError(
            f"Horovod over Gloo needs the same number of ranks on every node; {place.size} "
            f"ranks on {len(slurm.nodes)} nodes with {place.local_size} on this one",
            "give every node as many ranks (mpiexec -ppn N, flux run --tasks-per-node=N)",
        )
    raise LaunchError(
        f"Horovod over Gloo across nodes under {place.source} needs the nodes of the launch, and "
        "only Slurm says them (Hydra started by srun: mpiexec -launcher slurm)",
        "start Hydra's proxies with Slurm (mpiexec -launcher slurm, or I_MPI_HYDRA_BOOTSTRAP="
        "slurm), or launch with srun --mpi=pmix / Open MPI's mpirun",
    )


def plan_rendezvous(job: JobEnv, place: Placement, port: int) -> Rendezvous:
    """The rendezvous at ``port`` on the first node, which holds rank 0 (Hydra, PALS and Flux
    hand ranks to their per-node processes in node order)."""
    hosts, node = _nodes(job, place)
    refuse_above_highest(port)
    return Rendezvous(hosts[0], port, hosts, place.local_size, node)


def horovod_environment(rendezvous: Rendezvous, place: Placement) -> dict[str, str]:
    """What horovodrun --gloo would set for this rank."""
    return {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous.addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(rendezvous.port),
        "HOROVOD_HOSTNAME": rendezvous.hosts[rendezvous.node],
        "HOROVOD_RANK": str(place.rank),
        "HOROVOD_SIZE": str(place.size),
        "HOROVOD_LOCAL_RANK": str(place.local_rank),
        "HOROVOD_LOCAL_SIZE": str(place.local_size),
        "HOROVOD_CROSS_RANK": str(rendezvous.node),
        "HOROVOD_CROSS_SIZE": str(len(rendezvous.hosts)),
    }


def server_command(python: str, rendezvous: Rendezvous, size: int, watch_pid: int) -> list[str]:
    """The rendezvous server rank 0 starts; it ends when ``watch_pid`` (rank 0) does."""
    return [
        python,
        "-m",
        "ctrain.train.rendezvous",
        "--port",
        str(rendezvous.port),
        "--hosts",
        ",".join(rendezvous.hosts),
        "--local-size",
        str(rendezvous.local_size),
        "--size",
        str(size),
        "--watch-pid",
        str(watch_pid),
    ]
