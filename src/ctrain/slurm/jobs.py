"""sbatch job scripts rendered from the templates shipped in ctrain/jobs/ (the repository's
jobs/): pure functions, checked requests.

The templates are complete job scripts (they run as they are); rendering changes only their
values: the ``#SBATCH`` options, the default image and runtime, ``--nv``, and the default
training command. Values go into ``#SBATCH`` lines only when they are made of characters that
sbatch reads literally; shell values are quoted with ``shlex.quote``. Requests that cannot work
are refused with the fix: mirrored on several nodes, ``--nv`` without GPUs, a malformed time
limit, a warning signal that would come before the job starts.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ctrain.errors import ConfigError, CtrainError, JobRequestError
from ctrain.names import JOB_MODES, ONE_NODE_JOB_MODES, PYXIS, RUNTIME_CHOICES
from ctrain.slurm import network_job, profile_job, pyxis_job
from ctrain.util.shipped import shipped_dir

ENV_JOBS_DIR = "CTRAIN_JOBS_DIR"
MAX_SIGNAL_SECONDS = 65535  # sbatch --signal's limit
TEMPLATE_OPTIONS = ("nodes", "cpus-per-task", "mem", "time", "job-name", "signal")  # enabled


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


# ---- templates ------------------------------------------------------------------------------


def templates_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the job templates are: $CTRAIN_JOBS_DIR, else the ones shipped in the package
    (ctrain/jobs, found through importlib.resources)."""
    env = os.environ if environ is None else environ
    if not env.get(ENV_JOBS_DIR):
        return shipped_dir("jobs")
    chosen = Path(env[ENV_JOBS_DIR])
    if not (chosen / "single.sbatch").is_file():
        raise ConfigError(
            f"{ENV_JOBS_DIR}={chosen} holds no job templates (no single.sbatch)",
            f"point {ENV_JOBS_DIR} at a copy of ctrain's jobs/, or unset it",
        )
    return chosen


def _damaged(mode: str, what: str) -> ConfigError:
    """A job template that is not as ctrain writes them (edited by hand, or another version)."""
    name = f"jobs/{mode}.sbatch" if mode else "a job template"
    return ConfigError(
        f"{name} is damaged: {what}",
        f"restore jobs/ from ctrain's source, or set {ENV_JOBS_DIR} to an intact copy",
    )


def template(mode: str, environ: Mapping[str, str] | None = None) -> str:
    if mode not in JOB_MODES:
        raise JobRequestError(f"unknown job mode {mode!r}", f"use one of: {', '.join(JOB_MODES)}")
    return (templates_dir(environ) / f"{mode}.sbatch").read_text(encoding="utf-8")


_SBATCH = re.compile(r"^(#{1,2})SBATCH --([a-z-]+)=(.*)$", re.MULTILINE)


def sbatch_options(text: str) -> dict[str, str]:
    """The enabled ``#SBATCH --key=value`` options of a script (``##SBATCH`` is disabled)."""
    return {m.group(2): m.group(3) for m in _SBATCH.finditer(text) if m.group(1) == "#"}


# ---- values ---------------------------------------------------------------------------------

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


def _int(mode: str, options: Mapping[str, str], key: str) -> int:
    value = options[key]
    if not value.isdigit():
        raise _damaged(mode, f"#SBATCH --{key}={value} is not a whole number")
    return int(value)


def _default_image(mode: str, text: str) -> str:
    """The first word of the template's ``default_image=`` (shell quoting undone)."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise _damaged(mode, f"default_image={text}: {exc}") from None
    if not words:
        raise _damaged(mode, "default_image= is empty")
    return words[0]


def resolve(request: JobRequest, text: str) -> Resolved:
    """The template's values overridden by the request, and checked together."""
    mode = request.mode
    options = sbatch_options(text)
    missing = [key for key in TEMPLATE_OPTIONS if key not in options]
    if missing:
        raise _damaged(mode, f"no #SBATCH --{missing[0]}= line")
    signal = re.search(r"USR2@(\d+)", options["signal"])
    if signal is None:
        raise _damaged(mode, "no --signal=B:USR2@SECONDS line")
    defaults = re.search(r"^default_image=(.*)$", text, re.MULTILINE)
    runtime_default = re.search(r"^default_runtime=(.*)$", text, re.MULTILINE)
    if defaults is None or runtime_default is None:
        raise _damaged(mode, "no default_image= or default_runtime= line")
    gpus = request.gpus_per_node
    if gpus is None:
        gpus = _int(mode, options, "gpus-per-node") if "gpus-per-node" in options else 0
    values = Resolved(
        mode=mode,
        command=request.command,
        nodes=request.nodes if request.nodes is not None else _int(mode, options, "nodes"),
        gpus_per_node=gpus,
        tasks_per_node=request.tasks_per_node or 0,
        cpus_per_task=request.cpus_per_task or _int(mode, options, "cpus-per-task"),
        mem=request.mem or options["mem"],
        time=request.time or options["time"],
        partition=request.partition,
        account=request.account,
        job_name=request.job_name or options["job-name"],
        image=request.image or _default_image(mode, defaults.group(1)),
        runtime=request.runtime or runtime_default.group(1),
        nv=request.nv if request.nv is not None else gpus > 0,
        signal_seconds=request.signal_seconds or int(signal.group(1)),
        check_network=request.check_network,
        profile=request.profile,
    )
    return _checked(values)


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


def _checked(v: Resolved) -> Resolved:
    _check_command(v)
    tasks = _tasks_per_node(v)
    _check_limits(v)
    _check_names(v)
    return replace(v, tasks_per_node=tasks)


# ---- rendering ------------------------------------------------------------------------------


def _set_option(text: str, key: str, value: str | None) -> str:
    """Enable ``#SBATCH --key=value`` (the template's line for key, enabled or not), or disable
    it (``##SBATCH``) when value is None."""
    pattern = re.compile(rf"^#{{1,2}}SBATCH --{re.escape(key)}=.*$", re.MULTILINE)
    found = pattern.findall(text)
    if len(found) != 1:
        raise _damaged("", f"{len(found)} --{key} lines, not one")
    if value is None:
        old = found[0].lstrip("#")
        line = f"##{old}"
    else:
        line = f"#SBATCH --{key}={value}"
    return pattern.sub(lambda _: line, text)


def _set_line(text: str, pattern: str, line: str) -> str:
    regex = re.compile(pattern, re.MULTILINE)
    if len(regex.findall(text)) != 1:
        raise _damaged("", f"not exactly one line matching {pattern}")
    return regex.sub(lambda _: line, text)


def render_resolved(v: Resolved, text: str) -> str:
    text = _set_option(text, "job-name", v.job_name)
    text = _set_option(text, "nodes", str(v.nodes))
    text = _set_option(text, "ntasks-per-node", str(v.tasks_per_node))
    text = _set_option(text, "gpus-per-node", str(v.gpus_per_node) if v.gpus_per_node else None)
    text = _set_option(text, "cpus-per-task", str(v.cpus_per_task))
    text = _set_option(text, "mem", v.mem)
    text = _set_option(text, "time", v.time)
    text = _set_option(text, "signal", f"B:USR2@{v.signal_seconds}")
    text = _set_option(text, "partition", v.partition) if v.partition else text
    text = _set_option(text, "account", v.account) if v.account else text
    text = _set_line(text, r"^default_image=.*$", f"default_image={shlex.quote(v.image)}")
    text = _set_line(text, r"^default_runtime=.*$", f"default_runtime={v.runtime}")
    text = _set_line(
        text, r"^exec_options=\(.*\)$", "exec_options=(--nv)" if v.nv else "exec_options=()"
    )
    line = f"    set -- {shlex.join(v.command)}"
    if any(c in arg for arg in v.command for c in "$`"):  # literal in single quotes, on purpose
        line = "    # shellcheck disable=SC2016  # $ and ` in the command are literal\n" + line
    text = _set_line(text, r"^    set -- .*$", line)
    text = pyxis_job.render(text) if v.runtime == PYXIS else text
    text = profile_job.render(text, v.profile) if v.profile else text
    return network_job.render(text) if v.check_network else text


def render(request: JobRequest, environ: Mapping[str, str] | None = None) -> str:
    """The job script for ``request``, from its mode's template."""
    text = template(request.mode, environ)
    return render_resolved(resolve(request, text), text)


def sbatch_argv(script: str | os.PathLike[str]) -> list[str]:
    """The submission: ``--parsable`` prints the job id alone (``ID`` or ``ID;CLUSTER``)."""
    return ["sbatch", "--parsable", str(script)]


def job_id(sbatch_stdout: str) -> str:
    """The job id in ``sbatch --parsable`` output."""
    lines = [line for line in sbatch_stdout.strip().splitlines() if line.strip()]
    found = lines[-1].split(";")[0].strip() if lines else ""
    if not found.isdigit():
        raise CtrainError(
            f"sbatch printed no job id ({sbatch_stdout.strip()!r})", "run sbatch by hand"
        )
    return found
