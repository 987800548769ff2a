"""The preflight of a job's nodes: every node checks itself in seconds, before hours of training
are spent on it, and again after a failed step (``ctrain job preflight``; what follows is
``slurm/faults.py``'s).

From the batch step, one srun step with one task per node (``--overlap``: it also runs beside a
step that has not let go of its node) runs ``python -m ctrain.slurm.preflight`` on each node.
Each node prints one line, ``ctrain-preflight {json}``, with its checks:
- the GPUs Slurm gave it: nvidia-smi answers and lists at least as many (a GPU fallen off the
  bus, a driver that no longer loads);
- the job's directory (where checkpoints go) and the node's temporary directory: a small file
  written, synced and removed, and the free space there at least the preflight's minimum.
A node that prints no line within the timeout (lost, unreachable, its slurmd gone, a file system
that hangs) fails as one that did not answer. What is the same on every node (the image's CUDA
libraries, its MPI against the launcher's) is not a node's fault: ``ctrain launch`` checks it on
every rank as it starts, and refuses in one line.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path

from ctrain.checkline import Check
from ctrain.errors import ConfigError, CtrainError, UsageError
from ctrain.launch.gpus import Gpu, list_gpus
from ctrain.launch.hostlist import expand_hostlist
from ctrain.settings_table import Settings
from ctrain.slurm.faults import (
    Job,
    Retries,
    TaskEnd,
    Verdict,
    decide_after_check,
    summary,
    task_ends,
    this_run,
)
from ctrain.util import fs, proc

MARK = "ctrain-preflight "
TIMEOUT = 60.0  # seconds for every node to answer
PROBE_BYTES = 1 << 20  # written, synced and removed in each directory
PROBE_NAME = ".ctrain-preflight-"


# ---- on each node ---------------------------------------------------------------------------


def given_gpus(environ: Mapping[str, str]) -> int:
    """How many GPUs Slurm gave this node's task (SLURM_STEP_GPUS, else CUDA_VISIBLE_DEVICES)."""
    for name in ("SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = environ.get(name)
        if value is not None:
            return len([item for item in value.split(",") if item.strip()])
    return 0


def gpu_check(wanted: int, listed: Sequence[Gpu] | None) -> Check:
    if wanted == 0:
        return Check("gpus", "PASS", "none given to this node")
    if listed is None:
        return Check(
            "gpus",
            "FAIL",
            f"{wanted} given, but nvidia-smi is missing or fails",
            "the node's GPU driver: ask the site to look at this node",
        )
    if len(listed) < wanted:
        return Check(
            "gpus",
            "FAIL",
            f"{wanted} given, nvidia-smi lists {len(listed)}",
            "a GPU is lost on this node: ask the site to look at it",
        )
    return Check("gpus", "PASS", f"{wanted} given, nvidia-smi lists {len(listed)}")


def dir_check(name: str, path: Path, free: int | OSError, min_free_gib: int) -> Check:
    """The check of a directory from what probing it found: its free bytes, or the error."""
    if isinstance(free, OSError):
        reason = free.strerror or str(free)
        return Check(name, "FAIL", f"{path}: cannot write: {reason}", "free it or fix its rights")
    if free < min_free_gib * fs.GIB:
        return Check(
            name,
            "FAIL",
            f"{path}: {fs.human(free)} free, under {min_free_gib} GiB",
            "free space there (CTRAIN_PREFLIGHT_FREE sets the minimum)",
        )
    return Check(name, "PASS", f"{path}: writable, {fs.human(free)} free")


def probe_dir(path: Path) -> int | OSError:
    """Write, sync and remove a small file in ``path``; the free bytes there, or the error."""
    target = path / f"{PROBE_NAME}{socket.gethostname()}-{os.getpid()}"
    try:
        with open(target, "wb") as out:
            out.write(b"\0" * PROBE_BYTES)
            out.flush()
            os.fsync(out.fileno())
        return fs.free_bytes(path)
    except OSError as exc:
        return exc
    finally:
        fs.remove(target)


def node_checks(environ: Mapping[str, str], job_dir: Path, min_free_gib: int) -> list[Check]:
    temp = Path(environ.get("TMPDIR") or "/tmp")
    wanted = given_gpus(environ)
    return [
        gpu_check(wanted, list_gpus(environ) if wanted else ()),
        dir_check("job directory", job_dir, probe_dir(job_dir), min_free_gib),
        dir_check("temporary directory", temp, probe_dir(temp), min_free_gib),
    ]


def report_line(node: str, checks: Sequence[Check]) -> str:
    return MARK + json.dumps({"node": node, "checks": [asdict(c) for c in checks]})


def main(argv: Sequence[str] | None = None) -> int:
    """On a node: ``python -m ctrain.slurm.preflight JOB_DIR MIN_FREE_GIB``."""
    job_dir, min_free = sys.argv[1:] if argv is None else argv
    environ = os.environ
    node = environ.get("SLURMD_NODENAME") or socket.gethostname()
    print(report_line(node, node_checks(environ, Path(job_dir), int(min_free))), flush=True)
    return 0


# ---- from the batch step --------------------------------------------------------------------


def step_argv(python: str, nodes: int, job_dir: Path, min_free_gib: int) -> list[str]:
    """The srun step that runs the check once on each of the job's ``nodes``."""
    return [
        "srun",
        "--overlap",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=0",
        python,
        "-m",
        __name__,
        str(job_dir),
        str(min_free_gib),
    ]


def parse_reports(text: str) -> dict[str, list[Check]]:
    """Each node's checks from the step's output (other lines are not the check's)."""
    found: dict[str, list[Check]] = {}
    for line in text.splitlines():
        if not line.startswith(MARK):
            continue
        try:
            data = json.loads(line[len(MARK) :])
            found[str(data["node"])] = [Check(**c) for c in data["checks"]]
        except (ValueError, KeyError, TypeError):
            continue
    return found


def judge(nodes: Sequence[str], reports: Mapping[str, Sequence[Check]]) -> tuple[list[str], str]:
    """The nodes that failed or did not answer, and why, in one phrase."""
    bad: list[str] = []
    reasons: list[str] = []
    for node in nodes:
        checks = reports.get(node)
        if checks is None:
            bad.append(node)
            reasons.append(f"{node} did not answer")
            continue
        failed = [c for c in checks if c.status == "FAIL"]
        if failed:
            bad.append(node)
            reasons.extend(f"{node}: {c.name}: {c.detail}" for c in failed)
    return bad, "; ".join(reasons)


def log_lines(nodes: Sequence[str], reports: Mapping[str, Sequence[Check]]) -> list[str]:
    """The job log's account: how many nodes answered, then a line per check that did not pass
    and per node that did not answer (a thousand passing nodes make one line)."""
    lines = [f"ctrain job: preflight of {len(nodes)} node(s), {len(reports)} answered"]
    for node in nodes:
        if node not in reports:
            lines.append(
                f"  {node}: FAIL did not answer (the check could not start there, or ran past "
                f"{TIMEOUT:.0f} s)"
            )
        for check in reports.get(node, ()):
            if check.status != "PASS":
                fix = f" Fix: {check.fix}" if check.fix else ""
                lines.append(f"  {node}: {check.status} {check.name}: {check.detail}{fix}")
    return lines


def check_nodes(
    nodes: Sequence[str], job_dir: Path, min_free_gib: int, environ: Mapping[str, str]
) -> dict[str, list[Check]]:
    """Run the check on every node of the job; each node's checks (absent: it did not answer)."""
    argv = step_argv(sys.executable, len(nodes), job_dir, min_free_gib)
    _code, out = proc.run_within(argv, environ, TIMEOUT)
    return parse_reports(out)


def retries_path(submit_dir: Path, job_id: str) -> Path:
    """Where a job keeps its fault retries: beside its script's directory, one file per job."""
    return submit_dir / ".ctrain" / f"job-{job_id}.json"


def read_retries(path: Path) -> Retries:
    try:
        return Retries.from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Retries()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"the job's record of its fault retries, {path}, cannot be read ({exc})",
            "remove it (the job then counts its retries from 0)",
        ) from exc


LOG_TAIL = 1 << 20  # bytes of the job's log read for srun's reports of the last step


def _fields(text: str) -> dict[str, str]:
    """``scontrol -o show ...``'s Key=Value words."""
    return dict(word.split("=", 1) for word in text.split() if "=" in word)


def _scontrol_show(what: str, name: str, environ: Mapping[str, str]) -> dict[str, str]:
    """What scontrol says of a job or partition; empty when it cannot say (or is not there)."""
    try:
        done = proc.run(["scontrol", "-o", "show", what, name], environ, timeout=30)
    except CtrainError:
        return {}
    return _fields(done.stdout) if done.returncode == 0 else {}


def _log_tail(path: str) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(max(0, os.fstat(log.fileno()).st_size - LOG_TAIL))
            return log.read().decode(errors="replace")
    except OSError:
        return ""


def first_failure(record: Mapping[str, str], job_id: str, run: int) -> TaskEnd | None:
    """The first task srun reported ending badly in this run's part of the job's log."""
    log = this_run(_log_tail(record.get("StdErr", "")), job_id, run)
    ends = task_ends(log)
    return ends[0] if ends else None


def partition_nodes(record: Mapping[str, str], environ: Mapping[str, str]) -> tuple[str, ...]:
    """The nodes of the job's partition (empty when scontrol cannot say)."""
    name = record.get("Partition", "")
    nodes = _scontrol_show("partition", name, environ).get("Nodes", "") if name else ""
    try:
        return tuple(expand_hostlist(nodes, "the partition's Nodes")) if nodes else ()
    except CtrainError:
        return ()


def job_verdict(
    environ: Mapping[str, str], settings: Settings, job_dir: Path, exit_code: int | None
) -> tuple[Verdict, list[str]]:
    """Check this job's nodes (unless the preflight is off) and decide what follows: before
    training (``exit_code`` None) or after a step that failed with it. A requeue's retry is
    recorded before it is returned. Also the lines for the job's log."""
    job_id = environ.get("SLURM_JOB_ID")
    nodelist = environ.get("SLURM_JOB_NODELIST")
    if not job_id or not nodelist:
        raise UsageError(
            "ctrain job preflight checks the nodes of a Slurm job: SLURM_JOB_ID or "
            "SLURM_JOB_NODELIST is not set",
            "run it in a job script (ctrain job render puts it there)",
        )
    nodes = tuple(expand_hostlist(nodelist, "SLURM_JOB_NODELIST"))
    run = int(environ.get("SLURM_RESTART_COUNT") or 0)
    path = retries_path(Path(environ.get("SLURM_SUBMIT_DIR") or job_dir), job_id)
    retries = read_retries(path)
    bad: list[str] = []
    reasons = ""
    lines = [f"ctrain job: {summary(retries, settings.fault_retries)}"]
    if settings.preflight:
        reports = check_nodes(nodes, job_dir, settings.preflight_free, environ)
        bad, reasons = judge(nodes, reports)
        lines = log_lines(nodes, reports)
    record = _scontrol_show("job", job_id, environ)
    job = Job(run, nodes, partition_nodes(record, environ), retries, settings.fault_retries)
    first = None if exit_code is None else first_failure(record, job_id, run)
    verdict = decide_after_check(job, bad=bad, reasons=reasons, exit_code=exit_code, first=first)
    if verdict.record is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fs.write_text(path, Retries((*retries.retries, verdict.record)).to_json())
    return verdict, [*lines, f"ctrain job: {verdict.say}"]


if __name__ == "__main__":
    sys.exit(main())
