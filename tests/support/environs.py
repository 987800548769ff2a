"""The environments the launch tests give a rank: what srun sets in a Slurm step, what a batch
script of job 77 sees, and what MPICH's Hydra sets (on its own, or with its proxies started by
srun, `mpiexec.hydra -launcher slurm`: SLURM_PROCID and SLURM_STEP_NUM_TASKS then count proxies,
one per node)."""

from __future__ import annotations


def slurm_step(
    rank: int = 0,
    tasks: int = 1,
    nodes: str = "vm",
    *,
    per_node: str | None = None,
    local: int | None = None,
    node: int = 0,
    job: str = "77",
    step: str = "0",
    **extra: str | None,
) -> dict[str, str]:
    """What srun sets for task ``rank`` of a ``tasks``-task step of job ``job`` over the hostlist
    ``nodes``: ``per_node`` tasks a node (all on one node unless given), the task ``local`` on
    node ``node`` of the step (``rank`` unless given). ``extra`` adds variables or replaces
    them; None leaves one out."""
    env: dict[str, str | None] = {
        "SLURM_JOB_ID": job,
        "SLURM_STEP_ID": step,
        "SLURM_NTASKS": str(tasks),
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_STEP_NODELIST": nodes,
        "SLURM_STEP_NUM_TASKS": str(tasks),
        "SLURM_STEP_TASKS_PER_NODE": per_node or str(tasks),
        "SLURM_PROCID": str(rank),
        "SLURM_LOCALID": str(rank if local is None else local),
        "SLURM_NODEID": str(node),
        **extra,
    }
    return {name: value for name, value in env.items() if value is not None}


JOB = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "vm", "SLURM_NODEID": "0"}  # no step
STEP2 = slurm_step(1, 2)  # task 1 of `srun -n 2` on one node


def hydra(rank: int, size: int, local: int, nlocal: int) -> dict[str, str]:
    return {
        "PMI_RANK": str(rank),
        "PMI_SIZE": str(size),
        "PMI_FD": "6",
        "MPI_LOCALRANKID": str(local),
        "MPI_LOCALNRANKS": str(nlocal),
    }


def proxies_step(node: int) -> dict[str, str]:
    """The step `mpiexec -launcher slurm` starts in a job of 4 tasks: one Hydra proxy per node
    of cn[01-02]."""
    return slurm_step(
        node, 2, "cn[01-02]", per_node="1(x2)", local=0, node=node, job="91", SLURM_NTASKS="4"
    )


def hydra_under_srun(rank: int) -> dict[str, str]:
    """4 ranks on cn[01-02]: srun started one Hydra proxy per node (a 2-task step)."""
    return {**proxies_step(rank // 2), **hydra(rank, 4, rank % 2, 2)}
