"""Which distributed mode a process runs in, and its place in the world: pure decisions."""

from __future__ import annotations

from typing import NamedTuple

from ctrain.errors import LaunchError
from ctrain.launch.jobenv import MPI_LAUNCHERS, JobEnv, MpiEnv
from ctrain.names import AUTO, MULTI_PROCESS, Mode


class Placement(NamedTuple):
    """Where this process stands: its ranks, and which launcher's variables said so."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    source: str  # a launcher of jobenv.LAUNCHERS, "slurm" or "none"


def _started_by_mpi(job: JobEnv) -> bool:
    """An MPI launcher (mpirun, mpiexec, horovodrun, flux run) started this process's ranks."""
    return job.mpi.launcher in MPI_LAUNCHERS and (job.mpi.size or 1) > 1


def _srun_tasks(job: JobEnv) -> int:
    return (job.slurm.step_num_tasks or 1) if job.slurm.in_step else 1


def _batch_without_step(job: JobEnv) -> bool:
    """A batch script asked for several tasks but runs this command once, without srun."""
    slurm = job.slurm
    return (
        slurm.in_job and not slurm.in_step and (slurm.ntasks or 1) > 1 and job.mpi.launcher is None
    )


def choose_mode(requested: str, job: JobEnv, gpu_count: int) -> Mode:
    """The mode: an explicit request (flag > CTRAIN_MODE) when it fits, else worked out.

    ``gpu_count`` is how many GPUs this process can see.
    """
    processes = (job.mpi.size or 1) if _started_by_mpi(job) else _srun_tasks(job)
    if requested == AUTO:
        if _batch_without_step(job):
            raise LaunchError(
                f"the job has SLURM_NTASKS={job.slurm.ntasks} but this command runs once, "
                "outside any srun step",
                "launch it with srun (srun ctrain launch -- ...), or ask for --ntasks=1",
            )
        if _started_by_mpi(job):
            return Mode.HOROVOD
        if processes > 1:
            return Mode.MULTIWORKER
        return Mode.MIRRORED if gpu_count > 1 else Mode.SINGLE
    mode = Mode(requested)
    if mode not in MULTI_PROCESS and processes > 1:
        raise LaunchError(
            f"--mode {mode.value} runs one process, but {processes} were started",
            "use --mode multiworker or horovod, or start one task (srun -n 1)",
        )
    if mode in MULTI_PROCESS and _batch_without_step(job):
        raise LaunchError(
            f"--mode {mode.value} with SLURM_NTASKS={job.slurm.ntasks} but no srun step",
            "launch it with srun (srun ctrain launch -- ...) or mpirun",
        )
    if mode is Mode.HOROVOD and processes > 1 and job.mpi.launcher is None:
        raise LaunchError(
            f"--mode horovod under srun with {processes} tasks but no MPI/PMI variables",
            "use srun --mpi=pmix (or mpirun/horovodrun) so Horovod's MPI can start",
        )
    return mode


def placement(mode: Mode, job: JobEnv) -> Placement:
    """Rank, size and local rank for ``mode``: an MPI launcher's variables where one started the
    ranks, Slurm's under srun. mpirun leaves SLURM_PROCID at 0 on every rank, and Hydra started by
    srun sets it per node, so Slurm's are not trusted there.
    """
    mpi, slurm = job.mpi, job.slurm
    if mpi.launcher in MPI_LAUNCHERS and mpi.rank is not None:
        size = mpi.size or 1
        local_rank = mpi.local_rank if mpi.local_rank is not None else 0
        local_size = _mpi_local_size(mpi, size)
        return _checked(Placement(mpi.rank, size, local_rank, local_size, mpi.launcher))
    local_size = _local_size(job)
    if mode is Mode.HOROVOD and mpi.launcher in ("pmix", "pmi") and mpi.rank is not None:
        size = mpi.size or slurm.step_num_tasks or 1
        return _checked(Placement(mpi.rank, size, slurm.localid or 0, local_size, mpi.launcher))
    if slurm.in_step:
        return _checked(
            Placement(
                slurm.procid or 0,
                slurm.step_num_tasks or 1,
                slurm.localid or 0,
                local_size,
                "slurm",
            )
        )
    return Placement(0, 1, 0, 1, "none")


def _mpi_local_size(mpi: MpiEnv, size: int) -> int:
    """The launcher's local size; Flux says none, only its node count, and spreads tasks as
    evenly as it can, so no node holds more than size / nodes rounded up."""
    if mpi.local_size:
        return mpi.local_size
    if mpi.nodes:
        return -(-size // mpi.nodes)
    return 1


def _local_size(job: JobEnv) -> int:
    slurm = job.slurm
    if slurm.nodeid is not None and slurm.nodeid < len(slurm.tasks_per_node):
        return slurm.tasks_per_node[slurm.nodeid]
    return 1


def _checked(place: Placement) -> Placement:
    if not 0 <= place.rank < place.size:
        raise LaunchError(
            f"rank {place.rank} is not below the world size {place.size} ({place.source})",
            "the launcher's variables contradict each other; relaunch with srun or mpirun",
        )
    if not 0 <= place.local_rank < place.local_size:
        raise LaunchError(
            f"local rank {place.local_rank} is not below the local size {place.local_size} "
            f"({place.source})",
            "the launcher's variables contradict each other; relaunch with srun or mpirun",
        )
    return place
