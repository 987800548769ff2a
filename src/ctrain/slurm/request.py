"""A job request (``ctrain job render``'s options) and the values of the script it renders,
checked together: nodes, GPUs and tasks against the mode, the memory, the time limit and the
warning signal before it, and the words sbatch and the script read. Pure; the templates and the
rendering are ``slurm.jobs``'.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ctrain.errors import JobRequestError
from ctrain.names import ONE_NODE_JOB_MODES, PYXIS, RUNTIME_CHOICES
from ctrain.slurm import pyxis_job

MAX_SIGNAL_SECONDS = 65535  # sbatch --signal's limit


@dataclass(frozen=True)
class JobRequest:
    """What ``ctrain job render`` was asked; None keeps the template's value."""

    mode: str
    command: tuple[str, ...]
    nodes: int | None = None
    gpus_per_node: int | None = None
    tasks_per_node: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    time: str | None = None
    partition: str | None = None
    account: str | None = None
    job_name: str | None = None
    image: str | None = None
    runtime: str | None = None
    nv: bool | None = None
    signal_seconds: int | None = None
    check_network: bool = False  # run ctrain doctor --network first (slurm/network_job.py)
    profile: str | None = None  # trace these steps: CTRAIN_PROFILE in the script (FIRST-LAST)


@dataclass(frozen=True)
class Resolved:
    """Every value of the rendered script."""

    mode: str
    command: tuple[str, ...]
    nodes: int
    gpus_per_node: int
    tasks_per_node: int
    cpus_per_task: int
    mem: str
    time: str
    partition: str | None
    account: str | None
    job_name: str
    image: str
    runtime: str
    nv: bool
    signal_seconds: int
    check_network: bool = False
    profile: str | None = None


_TIME_FIX = "give MINUTES, MINUTES:SECONDS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, e.g. 04:00:00"


def parse_time(text: str) -> int:
    """Seconds in a Slurm time limit (the forms ``sbatch --time`` takes)."""
    bad = JobRequestError(f"--time {text!r} is not a Slurm time limit", _TIME_FIX)
    match = re.fullmatch(r"(?:(\d+)-)?(\d+(?::\d+){0,2})", text.strip())
    if match is None:
        raise bad
    days_text, rest = match.groups()
    parts = [int(p) for p in rest.split(":")]
    if days_text is None:
        if len(parts) == 1:
            h, m, s = 0, parts[0], 0
        elif len(parts) == 2:
            h, (m, s) = 0, parts
        else:
            h, m, s = parts
            if m >= 60:
                raise bad
        if s >= 60:
            raise bad
        days = 0
    else:
        days = int(days_text)
        h, m, s = (parts + [0, 0])[:3]
        if h >= 24 or m >= 60 or s >= 60:
            raise bad
    total = ((days * 24 + h) * 60 + m) * 60 + s
    if total <= 0:
        raise JobRequestError(f"--time {text!r} is no time at all", _TIME_FIX)
    return total


_WORD = re.compile(r"[A-Za-z0-9_.+-]+")
_LIST = re.compile(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")
_MEM = re.compile(r"\d+[KMGTkmgt]?")


def _check_word(option: str, value: str, pattern: re.Pattern[str], fix: str) -> None:
    if not pattern.fullmatch(value):
        raise JobRequestError(
            f"--{option} {value!r} has characters sbatch would not read as one value", fix
        )


def _check_command(v: Resolved) -> None:
    if not v.command or not any(v.command):
        raise JobRequestError(
            "no training command", "put it after --: ctrain job render MODE -- python train.py"
        )
    if any("\0" in arg for arg in v.command) or "\0" in v.image or "\n" in v.image:
        raise JobRequestError("a NUL or newline in the command or image", "remove it")


def _tasks_per_node(v: Resolved) -> int:
    """Nodes, GPUs and tasks checked together against the mode; the tasks per node they give."""
    if v.nodes < 1:
        raise JobRequestError(f"--nodes {v.nodes}: a job needs at least one node", "--nodes 1")
    if v.mode in ONE_NODE_JOB_MODES and v.nodes != 1:
        other = "multiworker or horovod-srun"
        raise JobRequestError(
            f"{v.mode} runs one process on one node, not on {v.nodes} nodes",
            f"use {other} for several nodes: ctrain job render multiworker --nodes {v.nodes} ...",
        )
    if v.gpus_per_node < 0:
        raise JobRequestError(f"--gpus-per-node {v.gpus_per_node}", "give 0 or more")
    if v.mode == "single" and v.gpus_per_node > 1:
        raise JobRequestError(
            f"single uses one GPU, not {v.gpus_per_node}",
            f"use mirrored for {v.gpus_per_node} GPUs of one node, or --gpus-per-node 1",
        )
    if v.nv and v.gpus_per_node == 0:
        raise JobRequestError(
            "--nv gives the container the node's GPUs, but the job asks for none",
            "ask for GPUs (--gpus-per-node N) or drop --nv (--no-nv) for a CPU-only job",
        )
    tasks = v.tasks_per_node
    if v.mode in ONE_NODE_JOB_MODES:
        if tasks not in (0, 1):
            raise JobRequestError(
                f"{v.mode} runs one task, not {tasks} per node",
                "drop --tasks-per-node, or use multiworker or horovod-srun for several ranks",
            )
        tasks = 1
    elif v.gpus_per_node > 0:
        if tasks not in (0, v.gpus_per_node):
            raise JobRequestError(
                f"{v.mode} runs one task per GPU: {tasks} tasks for {v.gpus_per_node} GPUs",
                f"drop --tasks-per-node (it follows --gpus-per-node) or give {v.gpus_per_node}",
            )
        tasks = v.gpus_per_node
    elif tasks == 0:
        tasks = 1  # CPU-only: one rank per node unless asked
    if tasks < 1 or v.cpus_per_task < 1:
        raise JobRequestError(
            "--tasks-per-node and --cpus-per-task must be at least 1",
            "give each a positive number, or leave --tasks-per-node out (it follows "
            "--gpus-per-node, else 1)",
        )
    return tasks


def _check_limits(v: Resolved) -> None:
    """Memory, time limit and the warning signal before it."""
    if not _MEM.fullmatch(v.mem):
        raise JobRequestError(
            f"--mem {v.mem!r} is not a Slurm memory size", "give a number with K, M, G or T: 32G"
        )
    seconds = parse_time(v.time)
    if not 1 <= v.signal_seconds <= MAX_SIGNAL_SECONDS:
        raise JobRequestError(
            f"--signal-seconds {v.signal_seconds} is out of range",
            f"give 1 to {MAX_SIGNAL_SECONDS} seconds",
        )
    if v.signal_seconds >= seconds:
        raise JobRequestError(
            f"the warning signal {v.signal_seconds} s before the limit would come before the "
            f"job starts (--time {v.time} is {seconds} s)",
            "ask for more time (--time) or an earlier warning (--signal-seconds)",
        )


def _check_names(v: Resolved) -> None:
    """Values sbatch and the script read as words: job name, partition, account, runtime, image."""
    _check_word("job-name", v.job_name, _WORD, "use letters, digits, . _ + - (ctrain-resnet50)")
    for option, value in (("partition", v.partition), ("account", v.account)):
        if value is not None:
            _check_word(option, value, _LIST, "use letters, digits, . _ - and commas (gpu,a100)")
    if v.runtime not in RUNTIME_CHOICES:
        raise JobRequestError(
            f"--runtime {v.runtime!r}", f"use one of: {', '.join(RUNTIME_CHOICES)}"
        )
    if not v.image:
        raise JobRequestError("an empty --image", "name the image, or use --runtime host")
    if v.runtime == PYXIS:
        pyxis_job.check(v.mode)


def checked(v: Resolved) -> Resolved:
    """``v`` checked as a whole (a request that cannot work is refused with the fix), with the
    tasks per node it gives."""
    _check_command(v)
    tasks = _tasks_per_node(v)
    _check_limits(v)
    _check_names(v)
    return replace(v, tasks_per_node=tasks)
