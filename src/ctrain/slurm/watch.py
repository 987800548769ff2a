"""After the job id, on the login node: what Slurm and ctrain's ledger say of jobs, the ledger's
new lines, and a log followed to the job's end. The decisions and formats are tracking's; this
module asks scontrol and sacct (through util.proc) and reads the files.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from ctrain.errors import ExternalToolError
from ctrain.slurm import tracking
from ctrain.slurm.tracking import JobState, LedgerEntry
from ctrain.util import proc

FOLLOW_INTERVAL = 1.0  # seconds between two looks at a followed job's log and state


def ledger(environ: Mapping[str, str]) -> dict[str, LedgerEntry]:
    """The ledger's entries by job id (the last entry of an id wins), oldest first."""
    path = tracking.ledger_path(environ)
    if not path.exists():
        return {}
    entries = tracking.parse_ledger(path.read_text(encoding="utf-8"), str(path))
    return {entry.job_id: entry for entry in entries}


def record(environ: Mapping[str, str], job_id: str, mode: str, script: str, workdir: str) -> str:
    """Append the submitted job to the ledger; a warning when it cannot be written (the job is
    submitted all the same), else ""."""
    log = tracking.submitted_log(script, job_id, workdir)
    now = datetime.now().astimezone().isoformat(timespec="seconds")
    line = tracking.ledger_line(LedgerEntry(job_id, now, mode, workdir, log))
    path = tracking.ledger_path(environ)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(line)
    except OSError as exc:
        return f"ctrain: warning: job {job_id} not recorded in {path}: {exc}"
    return ""


def _controller(ids: list[str]) -> list[JobState]:
    done = proc.run(tracking.scontrol_argv(ids))
    if done.returncode != 0:
        if len(ids) == 1 and tracking.unknown_to_scontrol(done.stderr):
            return []
        raise ExternalToolError(
            f"scontrol failed: {proc.failure(done)}", "check that Slurm answers: scontrol ping"
        )
    return tracking.parse_scontrol(done.stdout, ids)


def _accounting(ids: list[str]) -> list[JobState] | None:
    """sacct's records of the jobs; None where accounting is disabled."""
    done = proc.run(tracking.sacct_argv(ids))
    if done.returncode == 0:
        return tracking.parse_sacct(done.stdout)
    if tracking.accounting_disabled(done.stderr):
        return None
    raise ExternalToolError(f"sacct failed: {proc.failure(done)}", "run it by hand: sacct")


def states(ids: list[str], known_jobs: Mapping[str, LedgerEntry]) -> list[JobState]:
    """Each job's state: the controller's, else accounting's, else UNKNOWN with what the ledger
    says; a job none of them knows is an error."""
    known = {state.job_id: state for state in _controller(ids)} if ids else {}
    missing = [job for job in ids if job not in known]
    found = _accounting(missing) if missing else []
    known |= {state.job_id: state for state in found or [] if state.job_id in missing}
    result = []
    for job_id in ids:
        if job_id in known:
            result.append(tracking.with_ledger(known[job_id], known_jobs))
        elif job_id in known_jobs:
            result.append(tracking.from_ledger(known_jobs[job_id]))
        else:
            raise tracking.job_unknown(job_id, accounting=found is not None)
    return result


def print_from(path: str, offset: int, out: Callable[[bytes], None]) -> int:
    """Hand the log from byte ``offset`` on (from the start when it shrank) to ``out``; the
    offset reached. A log that does not exist yet gives nothing."""
    try:
        with open(path, "rb") as log:
            if os.fstat(log.fileno()).st_size < offset:
                offset = 0
            log.seek(offset)
            while chunk := log.read(1 << 20):
                out(chunk)
                offset += len(chunk)
    except FileNotFoundError:
        pass
    return offset


def follow(
    state: JobState,
    known_jobs: Mapping[str, LedgerEntry],
    out: Callable[[bytes], None],
    say: Callable[[str], None],
) -> JobState:
    """Hand the log to ``out`` as it grows until the job has ended (what it wrote before the
    state was read comes after it); the final state. ``say`` tells once that the log is
    awaited."""
    offset, told = 0, False
    while True:
        offset = print_from(state.log, offset, out)
        if tracking.is_final(state.state):
            return state
        if not told and not os.path.exists(state.log):
            say(f"job {state.job_id} is {state.state}: waiting for {state.log}")
            told = True
        time.sleep(FOLLOW_INTERVAL)
        (state,) = states([state.job_id], known_jobs)
