"""After the job id: the state, log and cancellation of jobs on the login node, and the ledger of
the jobs ``ctrain job submit`` submitted. Pure functions: argv builders, parsers of what
scontrol and sacct print, and the decisions; cli/jobs.py runs the programs.

Slurm's controller knows a job until ``MinJobAge`` seconds after it ends (300 by default), so
``scontrol show job --oneliner`` is asked first; sacct only for the jobs it forgot, and only where
accounting is enabled. The ledger, ``$XDG_STATE_HOME/ctrain/jobs.tsv``, holds one line per job
(id, submit time, mode, job directory, log): what is known of a job both have forgotten.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from ctrain.errors import ConfigError, CtrainError, UsageError
from ctrain.slurm.jobs import sbatch_options

#: States after which a job never runs again (scontrol's and sacct's words; our own UNKNOWN, a
#: job that neither the controller nor accounting knows any more, has ended too).
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
        "UNKNOWN",
    }
)
UNKNOWN = "UNKNOWN"
LEDGER_FILE = os.path.join("ctrain", "jobs.tsv")  # under $XDG_STATE_HOME
SACCT_FIELDS = ("JobID", "State", "Elapsed", "NodeList", "ExitCode", "User", "WorkDir")
_JOB_ID = re.compile(r"[0-9]+")
_KEY = re.compile(r" (?=[A-Z][A-Za-z0-9_:/]*=)")  # where scontrol -o starts its next Key=
_OWNER = re.compile(r"^(.*)\((\d+)\)$")  # UserId=name(uid)


class JobState(NamedTuple):
    job_id: str
    state: str  # RUNNING, PENDING, COMPLETED, ... or UNKNOWN
    elapsed: str = ""  # [D-]HH:MM:SS
    nodes: str = ""  # Slurm's node list, cn[01-03]
    restarts: int = 0
    exit_code: str = ""  # EXIT:SIGNAL, 0:0
    user: str = ""  # the owner's name, or uid when it has none
    log: str = ""  # the batch script's stdout, "" when unknown
    workdir: str = ""


class LedgerEntry(NamedTuple):
    job_id: str
    submitted: str  # ISO 8601, with the UTC offset
    mode: str
    workdir: str
    log: str


def is_final(state: str) -> bool:
    return state in FINAL_STATES


def checked_ids(ids: Iterable[str]) -> list[str]:
    """The job ids as given, refused unless each is a plain number (no arrays, no steps)."""
    found = list(ids)
    for job in found:
        if not _JOB_ID.fullmatch(job):
            raise UsageError(
                f"{job!r} is not a job id", "give the number sbatch printed, e.g. 1234"
            )
    return found


# ---- commands -------------------------------------------------------------------------------


def scontrol_argv(ids: Sequence[str]) -> list[str]:
    """One job's record, or with none or several ids every job the controller knows (filter
    them with ``parse_scontrol``): scontrol shows one id at a time."""
    return ["scontrol", "show", "job", "--oneliner", *(ids if len(ids) == 1 else [])]


def sacct_argv(ids: Sequence[str]) -> list[str]:
    """Accounting's records of the jobs, every run of a requeued job included (--duplicates)."""
    fields = ",".join(SACCT_FIELDS)
    return ["sacct", "--allusers", "--duplicates", "--parsable2", "--noheader",
            f"--format={fields}", "--jobs", ",".join(ids)]  # fmt: skip


def scancel_argv(job_id: str) -> list[str]:
    return ["scancel", job_id]


def unknown_to_scontrol(stderr: str) -> bool:
    """scontrol's failure for one id the controller does not know (never had, or forgot)."""
    return "Invalid job id specified" in stderr


def accounting_disabled(stderr: str) -> bool:
    """sacct's failure where AccountingStorageType=accounting_storage/none."""
    return "accounting storage is disabled" in stderr


# ---- parsers --------------------------------------------------------------------------------


def scontrol_fields(line: str) -> dict[str, str]:
    """One ``scontrol show job --oneliner`` line as its ``Key=Value`` pairs. Values may hold
    spaces (JobName, Command, WorkDir, Comment, StdOut...): a value ends where a space comes
    before a capitalized ``Key=``, and the first of a repeated key is kept (the format cannot
    tell a value holding `` Key=`` from a next key)."""
    fields: dict[str, str] = {}
    for pair in _KEY.split(line.rstrip()):
        key, sep, value = pair.partition("=")
        if sep:
            fields.setdefault(key, value)
    return fields


def _owner(user_id: str) -> str:
    """``name(uid)`` as the name, or the uid when Slurm knows no name."""
    match = _OWNER.match(user_id)
    if match is None:
        return user_id
    name, uid = match.groups()
    return name if name and name != "(null)" else uid


def _from_scontrol(fields: Mapping[str, str]) -> JobState:
    restarts = fields.get("Restarts", "0")
    return JobState(
        job_id=fields["JobId"],
        state=fields.get("JobState", UNKNOWN),
        elapsed=fields.get("RunTime", ""),
        nodes=fields.get("NodeList", ""),
        restarts=int(restarts) if restarts.isdigit() else 0,
        exit_code=fields.get("ExitCode", ""),
        user=_owner(fields.get("UserId", "")),
        log=fields.get("StdOut", ""),
        workdir=fields.get("WorkDir", ""),
    )


def parse_scontrol(text: str, ids: Iterable[str] = ()) -> list[JobState]:
    """The jobs of ``scontrol show job --oneliner``, those in ``ids`` only when given (array
    tasks and lines without a JobId are left out)."""
    wanted = set(ids)
    states = []
    for line in text.splitlines():
        fields = scontrol_fields(line)
        job = fields.get("JobId")
        if job and "ArrayTaskId" not in fields and (not wanted or job in wanted):
            states.append(_from_scontrol(fields))
    return states


def parse_sacct(text: str) -> list[JobState]:
    """The jobs of ``sacct_argv``'s output: each job's own lines (not its steps, ``ID.batch``,
    ``ID.extern``, ``ID.0``), the last run of a requeued job with the runs before counted as
    restarts. WorkDir is the last field: a ``|`` in it stays."""
    runs: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        values = line.split("|", len(SACCT_FIELDS) - 1)
        if len(values) == len(SACCT_FIELDS) and _JOB_ID.fullmatch(values[0]):
            runs.setdefault(values[0], []).append(values)
    states = []
    for job, found in runs.items():
        _, state, elapsed, nodes, exit_code, user, workdir = found[-1]
        words = state.split()  # "CANCELLED by 1001"
        states.append(
            JobState(
                job_id=job,
                state=words[0] if words else UNKNOWN,
                elapsed=elapsed,
                nodes="" if nodes == "None assigned" else nodes,
                restarts=len(found) - 1,
                exit_code=exit_code,
                user=user,
                workdir=workdir,
            )
        )
    return states


# ---- the ledger -----------------------------------------------------------------------------

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {v[1]: k for k, v in _ESCAPES.items()}


def _escape(value: str) -> str:
    return "".join(_ESCAPES.get(c, c) for c in value)


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: _UNESCAPES.get(m.group(1), m.group(0)), value)


def ledger_path(environ: Mapping[str, str]) -> Path:
    """``$XDG_STATE_HOME/ctrain/jobs.tsv``, else ``$HOME/.local/state/ctrain/jobs.tsv``."""
    base = environ.get("XDG_STATE_HOME") or os.path.join(
        environ.get("HOME", "~"), ".local", "state"
    )
    return Path(base, LEDGER_FILE)


def ledger_line(entry: LedgerEntry) -> str:
    """The entry as one line of tab-separated fields; a backslash, tab or line break in a
    field is written as ``\\\\``, ``\\t``, ``\\n``, ``\\r``."""
    return "\t".join(_escape(value) for value in entry) + "\n"


def parse_ledger(text: str, source: str = "the ledger") -> list[LedgerEntry]:
    """The entries of a ledger, oldest first; a line not as ledger_line writes it is refused
    with its number."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        values = [_unescape(value) for value in line.split("\t")]
        if len(values) != len(LedgerEntry._fields) or not _JOB_ID.fullmatch(values[0]):
            raise ConfigError(
                f"{source}, line {number}, is not a ledger line (job id, time, mode, directory, "
                "log, separated by tabs)",
                f"remove that line from {source}",
            )
        entries.append(LedgerEntry(*values))
    return entries


def submitted_log(script: str, job_id: str, workdir: str) -> str:
    """Where the job script's stdout goes: its ``#SBATCH --output=`` (sbatch's ``slurm-%j.out``
    without one) with %x (job name), %j and %A (job id) and %% expanded, under the directory
    it was submitted from."""
    options = sbatch_options(script)
    values = {"x": options.get("job-name", ""), "j": job_id, "A": job_id, "%": "%"}
    pattern = options.get("output", "slurm-%j.out")
    name = re.sub(r"%([xjA%])", lambda m: values[m.group(1)], pattern)
    return os.path.join(workdir, name)


def from_ledger(entry: LedgerEntry) -> JobState:
    """A job only the ledger remembers: its state unknown."""
    return JobState(entry.job_id, UNKNOWN, log=entry.log, workdir=entry.workdir)


def with_ledger(state: JobState, ledger: Mapping[str, LedgerEntry]) -> JobState:
    """The state with the ledger's log and directory where Slurm did not say them."""
    entry = ledger.get(state.job_id)
    if entry is None:
        return state
    return state._replace(log=state.log or entry.log, workdir=state.workdir or entry.workdir)


def job_unknown(job_id: str, accounting: bool) -> UsageError:
    """A job id that Slurm's controller, its accounting and the ledger do not know."""
    sacct = "not to accounting" if accounting else "accounting is disabled here"
    return UsageError(
        f"job {job_id} is not known: not to Slurm's controller (it forgets a job minutes after "
        f"it ends), {sacct}, not in ctrain's ledger of submitted jobs",
        "check the id: `ctrain job status` lists the jobs you submitted, `squeue --me` those "
        "in the queue",
    )


# ---- decisions ------------------------------------------------------------------------------


def cancel_action(state: JobState, me: str) -> bool:
    """Whether ``me`` cancels the job: False for a job that has ended; a job that is not
    ``me``'s is refused (root's too: an administrator runs scancel itself)."""
    if is_final(state.state):
        return False
    if state.user != me:
        raise UsageError(
            f"job {state.job_id} is {state.user}'s, not yours ({me}): not cancelled",
            "check the id (`ctrain job status` lists yours); to cancel another's job, run "
            f"scancel {state.job_id} as that user or as Slurm's administrator",
        )
    return True


def missing_log(state: JobState) -> CtrainError:
    """A job whose log is not there: not yet (follow it), or no more."""
    if is_final(state.state):
        return CtrainError(
            f"job {state.job_id} ended ({state.state}) and its log {state.log} is gone",
            f"look for it in the job's directory {state.workdir or '(unknown)'}",
        )
    return CtrainError(
        f"job {state.job_id} is {state.state}: its log {state.log} does not exist yet",
        f"follow it: ctrain job logs -f {state.job_id}",
    )


def ended_line(state: JobState) -> str:
    exit_code = f", exit {state.exit_code}" if state.exit_code else ""
    return f"job {state.job_id} ended: {state.state}{exit_code}"


# ---- output ---------------------------------------------------------------------------------

COLUMNS = ("JOBID", "STATE", "ELAPSED", "NODES", "RESTARTS", "EXIT", "LOG")


def _row(state: JobState) -> tuple[str, ...]:
    values = (state.job_id, state.state, state.elapsed, state.nodes, str(state.restarts))
    return tuple(value or "-" for value in (*values, state.exit_code, state.log))


def format_table(states: Sequence[JobState]) -> str:
    """The jobs as aligned columns under COLUMNS ("-" for what is not known), one line each."""
    rows = [COLUMNS, *(_row(state) for state in states)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS) - 1)]
    lines = [
        "  ".join([*(v.ljust(w) for v, w in zip(row[:-1], widths, strict=True)), row[-1]])
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def format_json(states: Sequence[JobState]) -> str:
    return json.dumps([state._asdict() for state in states], indent=2) + "\n"
