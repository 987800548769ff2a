"""sbatch job scripts rendered from the templates shipped in ctrain/jobs/ (the repository's
jobs/): pure functions, checked requests.

The templates are complete job scripts (they run as they are); rendering changes only their
values: the ``#SBATCH`` options, the default image and runtime, ``--nv``, and the default
training command. Values go into ``#SBATCH`` lines only when they are made of characters that
sbatch reads literally; shell values are quoted with ``shlex.quote``. Requests that cannot work
are refused with the fix (``slurm.request``: mirrored on several nodes, ``--nv`` without GPUs, a
malformed time limit, a warning signal that would come before the job starts).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from ctrain.errors import ConfigError, CtrainError, JobRequestError
from ctrain.names import JOB_MODES, PYXIS
from ctrain.slurm import network_job, profile_job, pyxis_job
from ctrain.slurm.request import JobRequest, Resolved, checked
from ctrain.util.shipped import shipped_dir

ENV_JOBS_DIR = "CTRAIN_JOBS_DIR"
TEMPLATE_OPTIONS = ("nodes", "cpus-per-task", "mem", "time", "job-name", "signal")  # enabled


# ---- templates ------------------------------------------------------------------------------


def templates_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the job templates are: $CTRAIN_JOBS_DIR, else the ones shipped in the package
    (ctrain/jobs, ``util.shipped``)."""
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


# ---- the request against its template ------------------------------------------------------


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
    return checked(values)


# ---- rendering ------------------------------------------------------------------------------


def _set_option(text: str, key: str, value: str | None) -> str:
    """Enable ``#SBATCH --key=value`` (the template's line for key, enabled or not), or disable
    it (``##SBATCH``) when value is None."""
    pattern = re.compile(rf"^#{{1,2}}SBATCH --{re.escape(key)}=.*$", re.MULTILINE)
    lines = pattern.findall(text)
    if len(lines) != 1:
        raise _damaged("", f"{len(lines)} --{key} lines, not one")
    if value is None:
        old = lines[0].lstrip("#")
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
    job = lines[-1].split(";")[0].strip() if lines else ""
    if not job.isdigit():
        raise CtrainError(
            f"sbatch printed no job id ({sbatch_stdout.strip()!r})", "run sbatch by hand"
        )
    return job
