"""What Slurm, the MPI launcher and the GPU allocation say about this process, as typed objects.

Everything is read from a ``Mapping[str, str]`` passed in; nothing here touches ``os.environ``.
Values are stripped; a variable set to an empty value counts as unset (except GPU lists, where
empty means "no GPU").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ctrain.errors import EnvironmentParseError
from ctrain.launch.hostlist import expand_hostlist, expand_tasks_per_node

SLURM_MAX_NORMAL_STEP_ID = 0xFFFFFFF0
"""Step ids above this are Slurm's special steps (batch, extern, interactive, pending)."""

_NOT_SRUN_STEPS = frozenset({"batch", "extern", "interactive"})
_NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_TASKS_PER_NODE_VARS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
_GPU_VARS = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "GPU_DEVICE_ORDINAL", "SLURM_JOB_GPUS")
_NO_GPU_VALUES = frozenset({"", "NoDevFiles", "-1"})
_GPU_ITEM = re.compile(
    r"[0-9]+"
    r"|GPU-[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)*"
    r"|MIG-(?:GPU-)?[0-9A-Fa-f]+(?:-[0-9A-Fa-f]+)*(?:/[0-9]+/[0-9]+)?"
)
_MIXED_FIX = (
    "run inside one Slurm step (srun) or one MPI launch, and do not copy SLURM_*, OMPI_*, "
    "PMI_* or HOROVOD_* variables between shells or jobs"
)


class Launcher(NamedTuple):
    """How one launcher names a rank's place: the variable that marks it, then the variables
    (first set wins) of rank, size, local rank and local size, and of its node count."""

    name: str
    marker: str
    rank: tuple[str, ...]
    size: tuple[str, ...] = ()
    local_rank: tuple[str, ...] = ()
    local_size: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()


_OMPI = "OMPI_COMM_WORLD_"
HOROVODRUN_GLOO = "horovod"  # horovodrun --gloo's own variables (with MPI, horovodrun is mpirun)
# In detection order: the launchers that also set PMI_RANK (Hydra, PALS, Flux) come before the
# plain PMI rows, and each is told apart by a variable only it sets. Sources: Open MPI's
# documentation; MPICH 4.0's Hydra (seen here: `mpiexec.hydra -n 2 env`, also under
# `-launcher slurm`, where SLURM_PROCID and SLURM_STEP_NUM_TASKS describe Hydra's proxies, one per
# node, not the ranks); HPE Cray PALS as ALCF documents it (PALS_* and Cray PMI's PMI_*); Flux's
# flux-environment(7) (FLUX_JOB_SIZE counts tasks).
LAUNCHERS: tuple[Launcher, ...] = (
    Launcher(
        "openmpi",
        f"{_OMPI}RANK",
        (f"{_OMPI}RANK",),
        (f"{_OMPI}SIZE",),
        (f"{_OMPI}LOCAL_RANK",),
        (f"{_OMPI}LOCAL_SIZE",),
    ),
    Launcher(
        HOROVODRUN_GLOO,
        "HOROVOD_RANK",
        ("HOROVOD_RANK",),
        ("HOROVOD_SIZE",),
        ("HOROVOD_LOCAL_RANK",),
        ("HOROVOD_LOCAL_SIZE",),
    ),
    Launcher(
        "hydra",
        "MPI_LOCALRANKID",
        ("PMI_RANK",),
        ("PMI_SIZE",),
        ("MPI_LOCALRANKID",),
        ("MPI_LOCALNRANKS",),
    ),
    Launcher(
        "pals",
        "PALS_RANKID",
        ("PALS_RANKID",),
        ("PMI_SIZE",),
        ("PALS_LOCAL_RANKID", "PMI_LOCAL_RANK"),
        ("PALS_LOCAL_SIZE", "PMI_LOCAL_SIZE"),
    ),
    Launcher(
        "flux",
        "FLUX_TASK_RANK",
        ("FLUX_TASK_RANK",),
        ("FLUX_JOB_SIZE",),
        ("FLUX_TASK_LOCAL_ID",),
        nodes=("FLUX_JOB_NNODES",),
    ),
    Launcher("pmix", "PMIX_RANK", ("PMIX_RANK",)),
    Launcher("pmi", "PMI_RANK", ("PMI_RANK",), ("PMI_SIZE",)),
)
MPI_LAUNCHERS = frozenset({"openmpi", "horovod", "hydra", "pals", "flux"})
"""Launchers that start every rank themselves and say its place (Slurm's variables, if any, then
describe the launcher's own processes, not the ranks)."""


def _text(environ: Mapping[str, str], name: str | None) -> str | None:
    """The stripped value of ``name``; None when unset or blank."""
    if name is None:
        return None
    value = environ.get(name, "").strip()
    return value or None


def _first(environ: Mapping[str, str], names: Sequence[str]) -> tuple[str, str] | None:
    """(name, value) of the first of ``names`` with a non-blank value."""
    for name in names:
        value = _text(environ, name)
        if value is not None:
            return name, value
    return None


def _first_name(environ: Mapping[str, str], names: Sequence[str]) -> str | None:
    pair = _first(environ, names)
    return pair[0] if pair else None


def _int(environ: Mapping[str, str], name: str | None) -> int | None:
    """A non-negative integer variable; None when unset."""
    value = _text(environ, name)
    if value is None or name is None:
        return None
    if not value.isascii() or not value.isdigit():
        raise EnvironmentParseError(
            f"{name}={environ[name]!r} is not a whole number >= 0.",
            f"check the value your launcher set; {name} should look like 0 or 4",
        )
    return int(value)


def _check_below(
    lower_name: str | None,
    lower: int | None,
    upper_name: str | None,
    upper: int | None,
    strict: bool = True,
) -> None:
    """Refuse ``lower >= upper`` (or ``lower > upper`` when not strict), when both are set."""
    if lower is None or upper is None:
        return
    if lower > upper or (strict and lower == upper):
        relation = "below" if strict else "at most"
        raise EnvironmentParseError(
            f"{lower_name}={lower} must be {relation} {upper_name}={upper}.", _MIXED_FIX
        )


class SlurmEnv(NamedTuple):
    """The Slurm job and step this process runs in (all None/empty outside Slurm)."""

    job_id: str | None
    step_id: str | None
    procid: int | None
    localid: int | None
    nodeid: int | None
    ntasks: int | None
    step_num_tasks: int | None
    nodes: tuple[str, ...]
    tasks_per_node: tuple[int, ...]
    cpus_per_task: int | None

    @property
    def in_job(self) -> bool:
        """Inside a Slurm allocation (batch script, salloc shell or step)."""
        return self.job_id is not None

    @property
    def in_step(self) -> bool:
        """Launched as a task of an srun step (not the batch, extern or interactive step)."""
        step = self.step_id
        if step is None or self.step_num_tasks is None or step in _NOT_SRUN_STEPS:
            return False
        return not (step.isascii() and step.isdigit()) or int(step) <= SLURM_MAX_NORMAL_STEP_ID

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> SlurmEnv:
        """Read and cross-check the SLURM_* variables."""
        nodelist = _first(environ, _NODELIST_VARS)
        tasks = _first(environ, _TASKS_PER_NODE_VARS)
        env = cls(
            job_id=_text(environ, "SLURM_JOB_ID"),
            step_id=_text(environ, "SLURM_STEP_ID"),
            procid=_int(environ, "SLURM_PROCID"),
            localid=_int(environ, "SLURM_LOCALID"),
            nodeid=_int(environ, "SLURM_NODEID"),
            ntasks=_int(environ, _first_name(environ, ("SLURM_NTASKS", "SLURM_NPROCS"))),
            step_num_tasks=_int(environ, "SLURM_STEP_NUM_TASKS"),
            nodes=tuple(expand_hostlist(nodelist[1], nodelist[0])) if nodelist else (),
            tasks_per_node=tuple(expand_tasks_per_node(tasks[1], tasks[0])) if tasks else (),
            cpus_per_task=_int(environ, "SLURM_CPUS_PER_TASK"),
        )
        _check_slurm(env, nodelist, tasks)
        return env


def _check_slurm(
    env: SlurmEnv, nodelist: tuple[str, str] | None, tasks: tuple[str, str] | None
) -> None:
    """Refuse Slurm variables that contradict each other."""
    _check_below("SLURM_PROCID", env.procid, "SLURM_STEP_NUM_TASKS", env.step_num_tasks)
    if nodelist is None or tasks is None:
        return
    if len(env.tasks_per_node) != len(env.nodes):
        raise EnvironmentParseError(
            f"{tasks[0]}={tasks[1]!r} gives {len(env.tasks_per_node)} node(s) but "
            f"{nodelist[0]}={nodelist[1]!r} lists {len(env.nodes)}.",
            _MIXED_FIX,
        )
    total = sum(env.tasks_per_node)
    if env.in_step and env.step_num_tasks is not None and total != env.step_num_tasks:
        raise EnvironmentParseError(
            f"{tasks[0]}={tasks[1]!r} adds up to {total} task(s) but "
            f"SLURM_STEP_NUM_TASKS={env.step_num_tasks}.",
            _MIXED_FIX,
        )


class MpiEnv(NamedTuple):
    """The MPI (or horovodrun, Flux) launch this process belongs to; all None when not launched
    so. ``nodes`` is the launch's node count where the launcher says it (Flux)."""

    launcher: str | None
    rank: int | None
    size: int | None
    local_rank: int | None
    local_size: int | None
    nodes: int | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> MpiEnv:
        """Detect the launcher (``LAUNCHERS``, in order) and read it."""
        for row in LAUNCHERS:
            if _text(environ, row.marker) is None:
                continue
            names = [_first_name(environ, group) for group in (row.rank, row.size)]
            local = [_first_name(environ, group) for group in (row.local_rank, row.local_size)]
            env = cls(
                launcher=row.name,
                rank=_int(environ, names[0]),
                size=_int(environ, names[1]),
                local_rank=_int(environ, local[0]),
                local_size=_int(environ, local[1]),
                nodes=_int(environ, _first_name(environ, row.nodes)),
            )
            _check_below(names[0], env.rank, names[1], env.size)
            _check_below(local[0], env.local_rank, local[1], env.local_size)
            _check_below(local[1], env.local_size, names[1], env.size, strict=False)
            return env
        return cls(launcher=None, rank=None, size=None, local_rank=None, local_size=None)


class GpuEnv(NamedTuple):
    """The GPUs this process may use: indices or UUIDs; () for none, None when unknown."""

    visible: tuple[str, ...] | None
    source: str | None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> GpuEnv:
        """Read the first set of CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS, GPU_DEVICE_ORDINAL,
        SLURM_JOB_GPUS. Empty, ``NoDevFiles`` and CUDA's ``-1`` mean no GPU."""
        for name in _GPU_VARS:
            if name in environ:
                return cls(visible=_parse_gpus(name, environ[name]), source=name)
        return cls(visible=None, source=None)


def _parse_gpus(name: str, raw: str) -> tuple[str, ...]:
    """A comma-separated list of GPU indices or GPU-/MIG- UUIDs, without duplicates."""
    value = raw.strip()
    if value in _NO_GPU_VALUES:
        return ()
    fix = f"set {name} to a list such as 0,1 or GPU-<uuid>, or unset it"
    items: list[str] = []
    seen: set[str] = set()
    for part in value.split(","):
        item = part.strip()
        if _GPU_ITEM.fullmatch(item) is None:
            raise EnvironmentParseError(
                f"{name}={raw!r} lists {item!r}, which is not a GPU index or GPU-/MIG- UUID.",
                fix,
            )
        key = str(int(item)) if item.isdigit() else item.upper()
        if key in seen:
            raise EnvironmentParseError(f"{name}={raw!r} lists GPU {item!r} twice.", fix)
        seen.add(key)
        items.append(item)
    return tuple(items)


class JobEnv(NamedTuple):
    """Slurm, MPI and GPU facts about this process, plus the host it runs on."""

    slurm: SlurmEnv
    mpi: MpiEnv
    gpus: GpuEnv
    hostname: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], hostname: str) -> JobEnv:
        """Read everything from ``environ``; ``hostname`` is passed in, not looked up."""
        return cls(
            slurm=SlurmEnv.from_environ(environ),
            mpi=MpiEnv.from_environ(environ),
            gpus=GpuEnv.from_environ(environ),
            hostname=hostname,
        )
