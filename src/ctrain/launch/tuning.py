"""Thread counts and polling defaults from the allocation: what ``ctrain launch`` tunes.

Pure: the environment, the mode, the rank's placement and the CPUs come in as arguments. Each
default is a variable set only when the environment does not already have it; one the user set
is kept and reported as kept. ``docs/performance.md`` has the measurements behind each one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ctrain.names import TUNE_OFF, Mode

INTRAOP, INTEROP, OMP = "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"
MPI_YIELD = "OMPI_MCA_mpi_yield_when_idle"
MALLOC = "GLIBC_TUNABLES"
# glibc's malloc neither maps nor unmaps a chunk of its own (mmap_max=0) and keeps up to 1 GiB
# of freed memory (trim_threshold): oneDNN's per-step buffers are then reused, where by default
# each step maps them afresh and every first write to a page faults (docs/performance.md)
KEEP_FREED = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
NOT_BOUND = ("", "none")  # SLURM_CPU_BIND_TYPE values that leave the tasks unbound


class Cpus(NamedTuple):
    """The CPUs this process may run on (its affinity mask) and the CPUs of its node."""

    mask: int
    node: int


class Tuned(NamedTuple):
    """One variable ctrain tunes: the value the rank gets and why; ``kept``: the user's."""

    name: str
    value: str
    reason: str
    kept: bool = False


def rank_threads(
    environ: Mapping[str, str], cpus_per_task: int | None, cpus: Cpus | None, local_size: int
) -> tuple[int, str] | None:
    """The CPUs this rank's threads should fill, and where the number comes from.

    Slurm's ``--cpus-per-task`` first; else the CPU mask: a task Slurm bound to its own CPUs
    (``SLURM_CPU_BIND_TYPE``) has its mask to itself, an unbound one shares it with the other
    ranks on its node. None when neither is known.
    """
    if cpus_per_task:
        return cpus_per_task, f"SLURM_CPUS_PER_TASK={cpus_per_task}"
    if cpus is None:
        return None
    bind = environ.get("SLURM_CPU_BIND_TYPE", "").replace(",", " ").strip()
    if bind not in NOT_BOUND:
        return cpus.mask, f"Slurm bound this task to {cpus.mask} CPU(s) ({bind})"
    ranks = max(1, local_size)
    share = max(1, cpus.mask // ranks)
    return share, f"{cpus.mask} CPU(s) in the task's mask shared by {ranks} rank(s) on the node"


def _thread_defaults(threads: int, source: str) -> dict[str, tuple[str, str]]:
    return {
        INTRAOP: (str(threads), f"one TensorFlow op thread per CPU of the rank: {source}"),
        INTEROP: (
            str(min(2, threads)),
            f"at most 2 ops side by side, within the rank's {threads} CPU(s)",
        ),
        OMP: (str(threads), f"OpenMP/BLAS threads as TensorFlow's: {source}"),
    }


def defaults(
    environ: Mapping[str, str],
    mode: Mode,
    local_size: int,
    cpus_per_task: int | None,
    cpus: Cpus | None,
) -> dict[str, tuple[str, str]]:
    """Every default this rank would get, by variable: (value, reason). MPI yields when the
    node's ranks times their op threads (the user's TF_NUM_INTRAOP_THREADS, else ctrain's)
    reach its CPUs."""
    op_threads = rank_threads(environ, cpus_per_task, cpus, local_size)
    if op_threads is None:
        return {}
    threads, source = op_threads
    chosen = _thread_defaults(threads, source)
    mine = str(environ.get(INTRAOP)).strip()
    running = int(mine) if mine.isdigit() and int(mine) > 0 else threads
    if mode is Mode.HOROVOD and cpus is not None and local_size * running >= cpus.node:
        chosen[MPI_YIELD] = (
            "1",
            f"{local_size} rank(s) x {running} thread(s) fill the node's {cpus.node} CPUs: "
            "idle MPI waits yield the CPU instead of spinning",
        )
    return chosen


def allocator(gpus: int) -> dict[str, tuple[str, str]]:
    """glibc's malloc keeps what it frees, for a rank whose CPU computes (no GPU): its
    convolutions' buffers are allocated and freed every step."""
    if gpus:
        return {}
    return {MALLOC: (KEEP_FREED, "no GPU: the CPU's kernels reuse freed memory, no page faults")}


def tune(
    environ: Mapping[str, str],
    choice: str,
    mode: Mode,
    local_size: int,
    cpus_per_task: int | None,
    cpus: Cpus | None,
    gpus: int,
) -> tuple[Tuned, ...]:
    """The tuned variables of this rank (``gpus``: the GPUs it was given), by name; those
    already in ``environ`` are kept."""
    if choice == TUNE_OFF:
        return ()
    chosen = defaults(environ, mode, local_size, cpus_per_task, cpus) | allocator(gpus)
    return tuple(
        Tuned(name, environ[name], "kept (set by you)", kept=True)
        if name in environ
        else Tuned(name, value, reason)
        for name, (value, reason) in sorted(chosen.items())
    )


def to_set(tuned: tuple[Tuned, ...]) -> dict[str, str]:
    """The variables ctrain sets: the tuned ones the user had not set."""
    return {t.name: t.value for t in tuned if not t.kept}
