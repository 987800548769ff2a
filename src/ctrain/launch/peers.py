"""Whether the ranks of a Horovod step watch each other's processes, and where rank 0 listens
for it (train/peerwatch.py): pure decisions.

Under ``srun --mpi=pmix`` (or PMI-2) without ``--kill-on-bad-exit`` nothing ends a Horovod step
whose rank died: Open MPI 4.1 has no mpirun daemons there to abort the job, Slurm's PMIx server
tells no rank, and the others wait in Horovod's allreduce for ever (docs/preemption.md). Every
other launcher ends the others itself (mpirun, horovodrun, Hydra, PALS, Flux), and multiworker
ranks see their peer's connection reset: only this case is watched.
"""

from __future__ import annotations

from ctrain.launch.jobenv import JobEnv
from ctrain.launch.ports import PEER_WATCH_SLOT, PortWindow
from ctrain.names import Mode

SRUN_PMI = frozenset({"pmix", "pmi"})
"""Launchers whose ranks srun starts itself, with MPI's process management and no MPI daemon."""


def watches_peers(mode: Mode, job: JobEnv, size: int) -> bool:
    """Horovod mode, several ranks, started by srun with PMIx or PMI-2."""
    return mode is Mode.HOROVOD and size > 1 and job.mpi.launcher in SRUN_PMI and job.slurm.in_step


def peer_watch_address(job: JobEnv, window: PortWindow) -> str:
    """``HOST:PORT`` of rank 0's watch: the step's first node (srun places task 0 there under
    block, cyclic and plane distributions) and the watch's port of the step's block."""
    slurm = job.slurm
    host = slurm.nodes[0] if slurm.nodes else job.hostname
    return f"{host}:{window.step_port(slurm.job_id, slurm.step_id, PEER_WATCH_SLOT)}"
