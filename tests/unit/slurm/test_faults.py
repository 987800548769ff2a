"""What a job does after a fault (slurm/faults.py): srun's reports of the step read back, the
truth table of ``decide_after_check``, the budget, and the record of retries."""

from __future__ import annotations

import pytest

from ctrain.errors import STALLED_EXIT_CODE, NodeFaultError
from ctrain.slurm.faults import (
    Job,
    Retries,
    Retry,
    TaskEnd,
    decide_after_check,
    signal_name,
    summary,
    task_ends,
    this_run,
)

NODES = ("cn01", "cn02", "cn03")
PARTITION = ("cn01", "cn02", "cn03", "cn04", "cn05")
NONE = Retries()
ONE_SPENT = Retries((Retry(0, ("cn02",), "cn02 failed the check: cn02 did not answer"),))
KILLED = TaskEnd("cn03", "2", None, "Killed")
STALLED = TaskEnd("cn01", "0", STALLED_EXIT_CODE, None)
RAISED = TaskEnd("cn02", "1", 1, None)


def job(retries: Retries = NONE, budget: int = 3, partition: tuple[str, ...] = PARTITION) -> Job:
    return Job(1, NODES, partition, retries, budget)


def verdict(
    bad: tuple[str, ...] = (),
    exit_code: int | None = None,
    first: TaskEnd | None = None,
    **facts: object,
) -> tuple[str, tuple[str, ...]]:
    found = decide_after_check(
        job(**facts),  # type: ignore[arg-type]
        bad=bad,
        reasons="why",
        exit_code=exit_code,
        first=first,
    )
    return found.action, found.exclude


@pytest.mark.parametrize(
    ("bad", "exit_code", "first", "expected"),
    [
        ((), None, None, ("go", ())),  # before training, every node passes
        (("cn03",), None, None, ("requeue", ("cn03",))),  # before training, one fails
        (("cn03",), 1, RAISED, ("requeue", ("cn03",))),  # after any failure, a node fails
        # srun's first report decides: a signal leaves that task's node out...
        ((), 143, KILLED, ("requeue", ("cn03",))),
        ((), 1, TaskEnd("cn01", "0", None, "Segmentation fault"), ("requeue", ("cn01",))),
        # ...a stall is no node's fault, a script's own error is not retried
        ((), 143, STALLED, ("requeue", ())),
        ((), 143, RAISED, ("end", ())),
        # every node at once: nothing to blame
        ((), 137, TaskEnd("cn[01-03]", "0-2", None, "Killed"), ("requeue", ())),
        # no report of srun's (mpirun): the step's exit code alone
        ((), STALLED_EXIT_CODE, None, ("requeue", ())),
        ((), 137, None, ("requeue", ())),  # SIGKILL (the OOM killer, kill -9)
        ((), 139, None, ("requeue", ())),  # SIGSEGV
        ((), 1, None, ("end", ())),  # the script's own error
        ((), 255, None, ("end", ())),  # 128 + 127: no such signal
    ],
)  # fmt: skip
def test_what_follows_a_check(
    bad: tuple[str, ...],
    exit_code: int | None,
    first: TaskEnd | None,
    expected: tuple[str, tuple[str, ...]],
) -> None:
    assert verdict(bad, exit_code, first) == expected


def test_nodes_left_out_before_stay_out() -> None:
    assert verdict(("cn03",), 137, retries=ONE_SPENT) == ("requeue", ("cn02", "cn03"))
    assert verdict((), 137, retries=ONE_SPENT) == ("requeue", ("cn02",))


def test_a_node_is_left_out_only_while_the_partition_keeps_enough() -> None:
    small = ("cn01", "cn02", "cn03", "cn04")
    assert verdict(("cn03",), None, retries=ONE_SPENT, partition=small) == ("requeue", ("cn02",))
    found = decide_after_check(
        job(ONE_SPENT, partition=small), bad=("cn03",), reasons="r", exit_code=None
    )
    assert "would leave its partition fewer than 3 nodes" in found.say
    assert "requeueing the job on the nodes it may use" in found.say
    assert verdict(("cn03",), None, partition=()) == ("requeue", ("cn03",))  # not known


@pytest.mark.parametrize(("bad", "exit_code"), [(("cn01",), None), ((), 137), ((), 124)])
def test_a_spent_budget_ends_the_job_in_one_line(
    bad: tuple[str, ...], exit_code: int | None
) -> None:
    with pytest.raises(NodeFaultError) as raised:
        verdict(bad, exit_code, retries=ONE_SPENT, budget=1)
    assert "fault retries are spent (fault retries used: 1 of 1; run 0: cn02 left out" in str(
        raised.value
    )
    assert raised.value.exit_code == 8


def test_a_spent_budget_still_goes_on_when_nothing_failed() -> None:
    assert verdict((), None, retries=ONE_SPENT, budget=1) == ("go", ())
    assert verdict((), 1, retries=ONE_SPENT, budget=1) == ("end", ())


def test_a_zero_budget_never_requeues() -> None:
    with pytest.raises(NodeFaultError):
        verdict(("cn02",), None, budget=0)


def test_every_node_failing_is_not_a_node_s_fault() -> None:
    with pytest.raises(NodeFaultError, match="every node of the job failed its check"):
        verdict(NODES, None)


def test_a_retry_is_recorded_with_its_run_and_reason() -> None:
    found = decide_after_check(
        job(ONE_SPENT), bad=("cn01",), reasons="cn01: gpus: 4 given, nvidia-smi lists 3",
        exit_code=None,
    )  # fmt: skip
    assert found.record == Retry(1, ("cn01",), "cn01 failed the check: cn01: gpus: 4 given, "
                                 "nvidia-smi lists 3")  # fmt: skip
    assert "requeueing the job without cn01 (fault retries used: 2 of 3)" in found.say
    assert found.line() == "requeue cn02,cn01"
    killed = decide_after_check(job(), bad=(), reasons="", exit_code=143, first=KILLED)
    assert killed.record == Retry(
        1, ("cn03",), "cn03: task 2 was ended by a signal (Killed), the first to end"
    )


def test_the_verdict_lines_the_job_script_reads() -> None:
    assert decide_after_check(job(), bad=(), reasons="", exit_code=137).line() == "requeue"
    assert decide_after_check(job(), bad=(), reasons="", exit_code=None).line() == "go"
    assert decide_after_check(job(), bad=(), reasons="", exit_code=1).line() == "end 1"
    raised = decide_after_check(job(), bad=(), reasons="", exit_code=143, first=RAISED)
    assert raised.line() == "end 1"  # the first failing rank's code, not srun's highest


SRUN_LOG = """\
ctrain job 7 run 0 on cn[01-03]: python train.py
srun: error: cn01: task 0: Exited with exit code 1
ctrain job 7 run 1 on cn[01-03]: python train.py
Epoch 3/5
srun: error: cn03: task 2: Killed
srun: launch/slurm: _step_signal: Terminating StepId=7.1
srun: error: cn[01-02]: tasks 0-1: Terminated
srun: error: cn01: task 0: Exited with exit code 124
"""


def test_srun_s_reports_are_read_in_order_from_this_run_only() -> None:
    assert task_ends(this_run(SRUN_LOG, "7", 1)) == [
        KILLED,
        TaskEnd("cn[01-02]", "0-1", None, "Terminated"),
        TaskEnd("cn01", "0", 124, None),
    ]
    assert task_ends(this_run(SRUN_LOG, "7", 0))[0] == TaskEnd("cn01", "0", 1, None)
    assert this_run(SRUN_LOG, "7", 2) == ""
    assert this_run(SRUN_LOG, "8", 1) == ""


def test_the_record_reads_back_what_it_wrote() -> None:
    assert Retries.from_json(ONE_SPENT.to_json()) == ONE_SPENT
    assert Retries.from_json(Retries().to_json()) == Retries()


def test_the_summary_names_each_retry() -> None:
    both = Retries((*ONE_SPENT.retries, Retry(1, (), "a rank stalled")))
    assert summary(both, 3) == (
        "fault retries used: 2 of 3; run 0: cn02 left out: cn02 failed the check: cn02 did not "
        "answer; run 1: same nodes: a rank stalled"
    )


@pytest.mark.parametrize(("code", "name"), [(137, "SIGKILL"), (143, "SIGTERM"), (134, "SIGABRT"),
                                            (1, None), (128, None), (255, None)])  # fmt: skip
def test_signal_names(code: int, name: str | None) -> None:
    assert signal_name(code) == name
