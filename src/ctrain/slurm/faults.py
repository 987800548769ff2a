"""What a job script does after a fault: a node that fails its check, a rank that was lost or
stuck. Pure: the decision from the facts (``decide_after_check``), and the job's record of its
fault retries (``Retries``, a JSON file of the job's own), which ``ctrain job preflight`` keeps.

A fault is blamed by checking, not by reading the remains: after a failed step every node of the
job is checked again (``slurm/preflight.py``), and the nodes that fail or do not answer are left
out of the next run. When every node passes, the step's exit code says the rest: a rank that was
killed by a signal or stalled (the watchdog's 124) is a fault of the moment and the job runs again
on the same nodes; any other exit code is the training's own error, which a rerun would repeat,
and it is not requeued.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Literal

from ctrain.errors import STALLED_EXIT_CODE, NodeFaultError
from ctrain.launch.hostlist import expand_hostlist

Action = Literal["go", "requeue", "end"]


@dataclass(frozen=True)
class Retry:
    """One fault that requeued the job: in which run, the nodes it left out, and why."""

    run: int
    left_out: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class Retries:
    """A job's fault retries so far, oldest first (time-limit and preemption requeues are not
    faults and are not here)."""

    retries: tuple[Retry, ...] = ()

    def left_out(self) -> tuple[str, ...]:
        """Every node left out so far, in the order they were, once each."""
        return tuple(dict.fromkeys(n for r in self.retries for n in r.left_out))

    def to_json(self) -> str:
        return json.dumps({"retries": [asdict(r) for r in self.retries]}, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Retries:
        data = json.loads(text)
        return cls(
            tuple(
                Retry(int(r["run"]), tuple(str(n) for n in r["left_out"]), str(r["why"]))
                for r in data["retries"]
            )
        )


@dataclass(frozen=True)
class Verdict:
    """What the job script does next: ``go`` on training, ``requeue`` leaving ``exclude`` out
    (every node left out so far; none: the same nodes), or ``end`` with ``exit_code`` (the
    first failing task's, which srun's own, the highest of all, may hide). ``say`` is for the
    job's log; ``record`` is the retry to keep, if one is spent."""

    action: Action
    say: str
    exclude: tuple[str, ...] = ()
    record: Retry | None = None
    exit_code: int = 0

    def line(self) -> str:
        """The one stdout line the job script reads: ``go``, ``end CODE`` or
        ``requeue [NODES]``."""
        if self.action == "requeue":
            return " ".join(["requeue", ",".join(self.exclude)]).strip()
        if self.action == "end":
            return f"end {self.exit_code}"
        return self.action


def signal_name(exit_code: int) -> str | None:
    """SIGKILL for 137 (a shell's and srun's 128 + the signal), None for an ordinary exit."""
    if exit_code <= 128:
        return None
    try:
        return signal.Signals(exit_code - 128).name
    except ValueError:
        return None


@dataclass(frozen=True)
class TaskEnd:
    """How srun saw a task of the step end: on which node, and either its exit code or the
    signal that ended it (srun's words: Killed, Terminated, Segmentation fault...)."""

    node: str
    tasks: str
    exit_code: int | None
    signal: str | None


# srun's line for a task that ended badly, its wording since Slurm 2.x:
#   srun: error: cn02: task 1: Killed
#   srun: error: cn[01-02]: tasks 0-3: Exited with exit code 1
_TASK_END = re.compile(
    r"^srun: error: (?P<node>[^:\s]+): tasks? (?P<tasks>[0-9,\-\[\]]+): (?P<what>.+?)\s*$",
    re.MULTILINE,
)
_EXITED = re.compile(r"Exited with exit code (\d+)")


def task_ends(log: str) -> list[TaskEnd]:
    """The tasks srun saw end badly, in the order it said so, from a run's part of its log."""
    ends = []
    for match in _TASK_END.finditer(log):
        what = match.group("what")
        exited = _EXITED.fullmatch(what)
        code = int(exited.group(1)) if exited else None
        ends.append(TaskEnd(match["node"], match["tasks"], code, None if exited else what))
    return ends


def this_run(log: str, job_id: str, run: int) -> str:
    """The part of a job's log that its run ``run`` wrote: from the job script's first line of
    that run (``ctrain job ID run N on ...``) on; "" when it is not there."""
    marker = f"ctrain job {job_id} run {run} on "
    at = log.rfind(marker)
    return "" if at < 0 else log[at:]


def _budget_line(done: int, budget: int) -> str:
    return f"fault retries used: {done} of {budget}"


def summary(retries: Retries, budget: int) -> str:
    """The log's account of the retries so far: how many of the budget, and each one."""
    parts = [f"run {r.run}: {_left(r.left_out)}: {r.why}" for r in retries.retries]
    return "; ".join([_budget_line(len(retries.retries), budget), *parts])


def _left(nodes: Sequence[str]) -> str:
    return f"{','.join(nodes)} left out" if nodes else "same nodes"


@dataclass(frozen=True)
class Job:
    """What a verdict needs to know of the job: its run (Slurm's restart count), its nodes, the
    nodes of its partition (empty: not known), its retries so far and its budget."""

    run: int
    nodes: tuple[str, ...]
    partition: tuple[str, ...]
    retries: Retries
    budget: int


def _retry(job: Job, bad: Sequence[str], why: str) -> Verdict:
    """Requeue leaving ``bad`` out (with those left out before), or end: the budget is spent.
    Nodes are left out only while the partition keeps enough for the job; else it is requeued
    on the nodes it may use, as a job left without enough nodes would wait for ever."""
    done = len(job.retries.retries)
    if done >= job.budget:
        raise NodeFaultError(
            f"{why}; the job's fault retries are spent ({summary(job.retries, job.budget)})",
            "look at the lines above and at the nodes named, then resubmit; a larger "
            "budget is CTRAIN_FAULT_RETRIES",
        )
    exclude = Retries((*job.retries.retries, Retry(job.run, tuple(bad), why))).left_out()
    if job.partition and len(set(job.partition) - set(exclude)) < len(job.nodes):
        why += (
            f" (leaving {','.join(bad)} out would leave its partition fewer than "
            f"{len(job.nodes)} nodes)"
        )
        bad = ()
        exclude = job.retries.left_out()
    record = Retry(job.run, tuple(bad), why)
    where = f"without {','.join(bad)}" if bad else "on the nodes it may use"
    say = f"{why}: requeueing the job {where} ({_budget_line(done + 1, job.budget)})"
    return Verdict("requeue", say, exclude, record)


def _first_failure(first: TaskEnd) -> tuple[tuple[str, ...], str] | None:
    """What srun's first report of a bad end says, when it blames a node: the task's node when
    a signal ended it (killed, crashed), none for a stall; None for the training's own error."""
    where = f"{first.node}: task {first.tasks}"
    if first.signal is not None:
        nodes = tuple(expand_hostlist(first.node, "srun's node"))
        return nodes, f"{where} was ended by a signal ({first.signal}), the first to end"
    if first.exit_code == STALLED_EXIT_CODE:
        return (), f"{where} stalled (exit code {first.exit_code}), the first to end"
    return None


def decide_after_check(
    job: Job,
    *,
    bad: Sequence[str],
    reasons: str,
    exit_code: int | None,
    first: TaskEnd | None = None,
) -> Verdict:
    """The next step of a job after its nodes were checked: before training (``exit_code``
    None) or after a step that ended with ``exit_code`` (not 0, not 75, no stop signal, the job
    still running). ``bad`` are the nodes that failed or did not answer, ``reasons`` says why;
    ``first`` is the first task srun saw end badly, when srun started the step."""
    if bad and len(bad) == len(job.nodes):
        raise NodeFaultError(
            f"every node of the job failed its check ({reasons}): not a node's fault, so the "
            "job is not requeued",
            "fix what the check lines above name (a directory, the disk, the GPUs), then "
            "resubmit; CTRAIN_PREFLIGHT=0 skips the check",
        )
    if bad:
        return _retry(job, bad, f"{','.join(bad)} failed the check: {reasons}")
    if exit_code is None:
        return Verdict("go", f"every node passes its check ({summary(job.retries, job.budget)})")
    if first is not None:
        blamed = _first_failure(first)
        if blamed is not None:
            nodes, why = blamed
            if len(nodes) >= len(job.nodes):
                nodes = ()
            return _retry(job, nodes, why)
        return _own_error(first.exit_code or exit_code)
    if exit_code == STALLED_EXIT_CODE:
        return _retry(job, (), f"a rank stalled (exit code {exit_code})")
    name = signal_name(exit_code)
    if name is not None:
        return _retry(job, (), f"a rank was ended by {name} (exit code {exit_code})")
    return _own_error(exit_code)


def _own_error(code: int) -> Verdict:
    return Verdict(
        "end",
        f"the training ended with exit code {code} on nodes that pass their check: its own "
        "error, which a rerun would repeat; not requeueing the job",
        exit_code=code,
    )
