"""slurm/tracking.py and ``ctrain job status|logs|cancel``: the parsers against what this
machine's Slurm 22.05 printed, the final-state and cancel truth tables, the ledger round trip,
the table; the commands with Slurm's programs answered by a recorder (``proc.run``).

SCONTROL is ``scontrol show job --oneliner ID`` for eight jobs, captured verbatim (cut into
literals, lines end with "Power= \\n"): an srun job on three nodes (no StdOut), a failed batch
job, a job cancelled while pending, one past its time limit, one running with spaces in its name,
directory and comment, one pending (--begin), one of the user ctrain-test, one requeued once.
Recapture after a Slurm upgrade with that command, a job of each kind in the queue.
sacct cannot be captured here (AccountingStorageType=accounting_storage/none): SACCT is written
in the format sacct's manual gives; ACCOUNTING_DISABLED is what sacct printed here.
"""

from __future__ import annotations

import itertools
import json
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ctrain.cli import jobs as cli_jobs
from ctrain.cli import main
from ctrain.errors import ConfigError, UsageError
from ctrain.slurm import jobs, tracking
from ctrain.slurm.request import JobRequest
from ctrain.slurm.tracking import JobState, LedgerEntry
from ctrain.util import proc

SCONTROL = (
    "JobId=2011 JobName=hostname UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=42"
    "94899749 Nice=0 Account=(null) QOS=(null) JobState=COMPLETED Reason=None Dependency="
    "(null) Requeue=1 Restarts=0 BatchFlag=0 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeL"
    "imit=00:01:00 TimeMin=N/A SubmitTime=2026-11-29T02:42:23 EligibleTime=2026-11-29T02:"
    "42:23 AccrueTime=Unknown StartTime=2026-11-29T02:42:23 EndTime=2026-11-29T02:42:23 D"
    "eadline=N/A PreemptEligibleTime=2026-11-29T02:42:23 PreemptTime=None SuspendTime=Non"
    "e SecsPreSuspend=0 LastSchedEval=2026-11-29T02:42:23 Scheduler=Main Partition=cluste"
    "r AllocNode:Sid=vm:3250 ReqNodeList=(null) ExcNodeList=(null) NodeList=cn[01-03] Bat"
    "chHost=cn01 NumNodes=3 NumCPUs=3 NumTasks=3 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu="
    "3,node=3,billing=3 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 Mi"
    "nMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=YES "
    "Contiguous=0 Licenses=(null) Network=(null) Command=hostname WorkDir=/work/main Powe"
    "r= \n"
    "JobId=2012 JobName=trkfail UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=429"
    "4899748 Nice=0 Account=(null) QOS=(null) JobState=FAILED Reason=NonZeroExitCode Depe"
    "ndency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0 RunTime=00:00:0"
    "0 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T02:42:29 EligibleTime=2026-1"
    "1-29T02:42:29 AccrueTime=2026-11-29T02:42:29 StartTime=2026-11-29T02:42:29 EndTime=2"
    "026-11-29T02:42:29 Deadline=N/A PreemptEligibleTime=2026-11-29T02:42:29 PreemptTime="
    "None SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T02:42:29 Scheduler=M"
    "ain Partition=debug AllocNode:Sid=vm:3250 ReqNodeList=(null) ExcNodeList=(null) Node"
    "List=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUs"
    "Node=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubsc"
    "ribe=YES Contiguous=0 Licenses=(null) Network=(null) Command=/tmp/trk/b.sh WorkDir=/"
    "tmp/trk StdErr=/tmp/trk/trkfail-2012.out StdIn=/dev/null StdOut=/tmp/trk/trkfail-201"
    "2.out Power= \n"
    "JobId=2016 JobName=tocancel UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=42"
    "94899744 Nice=0 Account=(null) QOS=(null) JobState=CANCELLED Reason=Priority Depende"
    "ncy=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 T"
    "imeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T02:42:33 EligibleTime=2026-11-2"
    "9T02:42:33 AccrueTime=Unknown StartTime=2026-11-29T02:42:34 EndTime=2026-11-29T02:42"
    ":34 Deadline=N/A PreemptEligibleTime=2026-11-29T02:42:34 PreemptTime=None SuspendTim"
    "e=None SecsPreSuspend=0 LastSchedEval=2026-11-29T02:42:33 Scheduler=Main Partition=d"
    "ebug AllocNode:Sid=vm:3250 ReqNodeList=(null) ExcNodeList=(null) NodeList= NumNodes="
    "1 NumCPUs=1 NumTasks=N/A CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,mem=24105M,node=1"
    ",billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryN"
    "ode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=YES Contiguo"
    "us=0 Licenses=(null) Network=(null) Command=/tmp/trk/dir with space/a.sh WorkDir=/tm"
    "p/trk/dir with space StdErr=/tmp/trk/dir with space/tocancel-2016.out StdIn=/dev/nul"
    "l StdOut=/tmp/trk/dir with space/tocancel-2016.out Power= \n"
    "JobId=2018 JobName=trktime UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=429"
    "4899742 Nice=0 Account=(null) QOS=(null) JobState=TIMEOUT Reason=TimeLimit Dependenc"
    "y=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:01:00 Ti"
    "meLimit=00:01:00 TimeMin=N/A SubmitTime=2026-11-29T02:43:50 EligibleTime=2026-11-29T"
    "02:43:50 AccrueTime=2026-11-29T02:43:50 StartTime=2026-11-29T02:43:50 EndTime=2026-1"
    "1-29T02:44:50 Deadline=N/A PreemptEligibleTime=2026-11-29T02:43:50 PreemptTime=None "
    "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T02:43:50 Scheduler=Backfi"
    "ll Partition=debug AllocNode:Sid=vm:3250 ReqNodeList=(null) ExcNodeList=(null) NodeL"
    "ist=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* T"
    "RES=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsN"
    "ode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscr"
    "ibe=YES Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp/trk/"
    "dir with space StdErr=/tmp/trk/dir with space/slurm-2018.out StdIn=/dev/null StdOut="
    "/tmp/trk/dir with space/slurm-2018.out Power= \n"
    "JobId=2020 JobName=trk a UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=42948"
    "99740 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null"
    ") Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:03 TimeLimit="
    "UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T02:45:05 EligibleTime=2026-11-29T02:45:0"
    "5 AccrueTime=2026-11-29T02:45:05 StartTime=2026-11-29T02:45:06 EndTime=Unknown Deadl"
    "ine=N/A PreemptEligibleTime=2026-11-29T02:45:06 PreemptTime=None SuspendTime=None Se"
    "csPreSuspend=0 LastSchedEval=2026-11-29T02:45:06 Scheduler=Main Partition=debug Allo"
    "cNode:Sid=vm:3250 ReqNodeList=(null) ExcNodeList=(null) NodeList=vm BatchHost=vm Num"
    "Nodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,node=1,billin"
    "g=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 M"
    "inTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=YES Contiguous=0 Li"
    "censes=(null) Network=(null) Command=/tmp/trk/dir with space/a.sh WorkDir=/tmp/trk/d"
    "ir with space Comment=a comment with spaces=x y  StdErr=/tmp/trk/dir with space/trk "
    "a-2020.out StdIn=/dev/null StdOut=/tmp/trk/dir with space/trk a-2020.out Power= \n"
    "JobId=2021 JobName=held UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=429489"
    "9739 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=BeginTime Dependency=("
    "null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLi"
    "mit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T02:45:05 EligibleTime=2026-11-29T03:"
    "45:05 AccrueTime=2026-11-29T03:45:05 StartTime=2026-11-29T03:45:05 EndTime=Unknown D"
    "eadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T02:45:05 Sche"
    "duler=Main Partition=debug AllocNode:Sid=vm:3250 ReqNodeList=(null) ExcNodeList=(nul"
    "l) NodeList= NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu"
    "=1,mem=24105M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinC"
    "PUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSu"
    "bscribe=YES Contiguous=0 Licenses=(null) Network=(null) Command=/tmp/trk/dir with sp"
    "ace/a.sh WorkDir=/tmp/trk/dir with space StdErr=/tmp/trk/dir with space/held-2021.ou"
    "t StdIn=/dev/null StdOut=/tmp/trk/dir with space/held-2021.out Power= \n"
    "JobId=2022 JobName=other UserId=ctrain-test(1001) GroupId=ctrain-test(1001) MCS_labe"
    "l=N/A Priority=4294899738 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=N"
    "one Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime"
    "=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T02:45:05 EligibleTim"
    "e=2026-11-29T02:45:05 AccrueTime=2026-11-29T02:45:05 StartTime=2026-11-29T02:45:06 E"
    "ndTime=Unknown Deadline=N/A PreemptEligibleTime=2026-11-29T02:45:06 PreemptTime=None"
    " SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T02:45:06 Scheduler=Main "
    "Partition=debug AllocNode:Sid=vm:3250 ReqNodeList=(null) ExcNodeList=(null) NodeList"
    "=vm BatchHost=vm NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES"
    "=cpu=1,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode"
    "=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe"
    "=YES Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/tmp StdErr="
    "/tmp/slurm-2022.out StdIn=/dev/null StdOut=/tmp/slurm-2022.out Power= \n"
    "JobId=2023 JobName=trkrequeue UserId=root(0) GroupId=root(0) MCS_label=N/A Priority="
    "4294899737 Nice=0 Account=(null) QOS=(null) JobState=PENDING Reason=BeginTime Depend"
    "ency=(null) Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 "
    "TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T02:45:08 EligibleTime=2026-11-"
    "29T02:47:09 AccrueTime=2026-11-29T02:47:09 StartTime=2026-11-29T02:47:09 EndTime=Unk"
    "nown Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T02:45:0"
    "6 Scheduler=Main Partition=debug AllocNode:Sid=vm:3250 ReqNodeList=(null) ExcNodeLis"
    "t=(null) NodeList= NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TR"
    "ES=cpu=1,mem=24105M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec="
    "* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=YES Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir"
    "=/tmp/trk/dir with space StdErr=/tmp/trk/dir with space/rq-2023.out StdIn=/dev/null "
    "StdOut=/tmp/trk/dir with space/rq-2023.out Power= \n"
)

ACCOUNTING_DISABLED = "Slurm accounting storage is disabled\n"  # sacct's stderr, exit 1
UNKNOWN_ID = "slurm_load_jobs error: Invalid job id specified\n"  # scontrol's, exit 1
SPACES = "/tmp/trk/dir with space"

PARSED = [
    JobState("2011", "COMPLETED", "00:00:00", "cn[01-03]", 0, "0:0", "root", "", "/work/main"),
    JobState(
        "2012",
        "FAILED",
        "00:00:00",
        "vm",
        0,
        "3:0",
        "root",
        "/tmp/trk/trkfail-2012.out",
        "/tmp/trk",
    ),
    JobState(
        "2016", "CANCELLED", "00:00:00", "", 0, "0:0", "root", f"{SPACES}/tocancel-2016.out", SPACES
    ),
    JobState(
        "2018", "TIMEOUT", "00:01:00", "vm", 0, "0:15", "root", f"{SPACES}/slurm-2018.out", SPACES
    ),
    JobState(
        "2020", "RUNNING", "00:00:03", "vm", 0, "0:0", "root", f"{SPACES}/trk a-2020.out", SPACES
    ),
    JobState(
        "2021", "PENDING", "00:00:00", "", 0, "0:0", "root", f"{SPACES}/held-2021.out", SPACES
    ),
    JobState(
        "2022", "RUNNING", "00:00:03", "vm", 0, "0:0", "ctrain-test", "/tmp/slurm-2022.out", "/tmp"
    ),
    JobState("2023", "PENDING", "00:00:00", "", 1, "0:0", "root", f"{SPACES}/rq-2023.out", SPACES),
]
BY_ID = {state.job_id: state for state in PARSED}
LINES = {line.split(" ", 1)[0].removeprefix("JobId="): line for line in SCONTROL.splitlines(True)}


# ---- parsers --------------------------------------------------------------------------------


def test_scontrol_golden() -> None:
    assert tracking.parse_scontrol(SCONTROL) == PARSED


def test_scontrol_keeps_the_jobs_asked_for() -> None:
    assert tracking.parse_scontrol(SCONTROL, ["2023", "2011", "9"]) == [
        BY_ID["2011"],
        BY_ID["2023"],
    ]
    assert tracking.parse_scontrol("") == []


def test_scontrol_values_with_spaces_and_equals_signs() -> None:
    fields = tracking.scontrol_fields(LINES["2020"])
    assert fields["JobName"] == "trk a" and fields["Command"] == f"{SPACES}/a.sh"
    assert fields["Comment"] == "a comment with spaces=x y "
    assert fields["Power"] == "" and fields["AllocNode:Sid"] == "vm:3250"
    assert fields["CPUs/Task"] == "1" and fields["ReqB:S:C:T"] == "0:0:*:*"


def test_scontrol_a_key_repeated_in_a_later_value_does_not_change_the_state() -> None:
    line = LINES["2020"].replace("Comment=a comment", "Comment=x JobState=FAILED ExitCode=1:0 y")
    assert tracking.parse_scontrol(line) == [BY_ID["2020"]]


def test_scontrol_leaves_out_array_tasks() -> None:
    line = LINES["2012"].replace(" JobName=", " ArrayJobId=2012 ArrayTaskId=3 JobName=")
    assert tracking.parse_scontrol(line) == []


SACCT = """\
2030|COMPLETED|00:01:02|cn[01-02]|0:0|alice|/home/alice/run a|b
2030.batch|COMPLETED|00:01:02|cn01|0:0||
2030.extern|COMPLETED|00:01:02|cn[01-02]|0:0||
2030.0|COMPLETED|00:01:00|cn[01-02]|0:0||
2031|REQUEUED|00:10:00|cn03|0:0|alice|/home/alice
2031|PREEMPTED|00:05:00|cn04|0:0|alice|/home/alice
2031|CANCELLED by 1001|00:00:30|cn05|0:15|alice|/home/alice
2031.batch|CANCELLED|00:00:30|cn05|0:15||
2032|PENDING|00:00:00|None assigned|0:0|bob|/home/bob
"""


def test_sacct_keeps_each_job_and_counts_its_runs() -> None:
    assert tracking.parse_sacct(SACCT) == [
        JobState(
            "2030",
            "COMPLETED",
            "00:01:02",
            "cn[01-02]",
            0,
            "0:0",
            "alice",
            "",
            "/home/alice/run a|b",
        ),
        JobState("2031", "CANCELLED", "00:00:30", "cn05", 2, "0:15", "alice", "", "/home/alice"),
        JobState("2032", "PENDING", "00:00:00", "", 0, "0:0", "bob", "", "/home/bob"),
    ]
    assert tracking.parse_sacct("") == []


def test_the_failures_told_apart() -> None:
    assert tracking.accounting_disabled(ACCOUNTING_DISABLED)
    assert not tracking.accounting_disabled("sacct: error: Problem talking to the database")
    assert tracking.unknown_to_scontrol(UNKNOWN_ID)
    assert not tracking.unknown_to_scontrol(
        "slurm_load_jobs error: Unable to contact slurm controller"
    )


# ---- commands -------------------------------------------------------------------------------


def test_argv() -> None:
    assert tracking.scontrol_argv(["7"]) == ["scontrol", "show", "job", "--oneliner", "7"]
    assert tracking.scontrol_argv([]) == ["scontrol", "show", "job", "--oneliner"]
    assert tracking.scontrol_argv(["7", "8"]) == ["scontrol", "show", "job", "--oneliner"]
    assert tracking.sacct_argv(["7", "8"]) == [
        "sacct", "--allusers", "--duplicates", "--parsable2", "--noheader",
        "--format=JobID,State,Elapsed,NodeList,ExitCode,User,WorkDir", "--jobs", "7,8",
    ]  # fmt: skip
    assert tracking.scancel_argv("7") == ["scancel", "7"]


@pytest.mark.parametrize("job", ["", "12a", "7.batch", "7_1", "-1", " 7", "7\n"])
def test_a_job_id_is_a_number(job: str) -> None:
    with pytest.raises(UsageError, match="is not a job id"):
        tracking.checked_ids(["7", job])


# ---- decisions ------------------------------------------------------------------------------

SLURM_STATES = {  # every job state of Slurm 22.05, and ours: final or not
    "BOOT_FAIL": True, "CANCELLED": True, "COMPLETED": True, "DEADLINE": True, "FAILED": True,
    "NODE_FAIL": True, "OUT_OF_MEMORY": True, "PREEMPTED": True, "REVOKED": True, "TIMEOUT": True,
    "UNKNOWN": True,
    "PENDING": False, "RUNNING": False, "SUSPENDED": False, "COMPLETING": False,
    "CONFIGURING": False, "REQUEUED": False, "REQUEUE_HOLD": False, "REQUEUE_FED": False,
    "RESIZING": False, "SPECIAL_EXIT": False, "STOPPED": False, "SIGNALING": False,
    "STAGE_OUT": False, "RESV_DEL_HOLD": False,
}  # fmt: skip


@pytest.mark.parametrize(("state", "final"), sorted(SLURM_STATES.items()))
def test_final_states(state: str, final: bool) -> None:
    assert tracking.is_final(state) is final


@pytest.mark.parametrize(
    ("state", "owner"), list(itertools.product(sorted(SLURM_STATES), ["me", "other", ""]))
)
def test_cancel_truth_table(state: str, owner: str) -> None:
    job = JobState("5", state, user=owner)
    if SLURM_STATES[state]:
        assert tracking.cancel_action(job, "me") is False  # ended: said so, whoever's it was
    elif owner == "me":
        assert tracking.cancel_action(job, "me") is True
    else:
        with pytest.raises(UsageError, match=f"job 5 is {owner}'s, not yours \\(me\\)"):
            tracking.cancel_action(job, "me")


def test_ended_line() -> None:
    assert tracking.ended_line(BY_ID["2018"]) == "job 2018 ended: TIMEOUT, exit 0:15"
    assert tracking.ended_line(JobState("9", "UNKNOWN")) == "job 9 ended: UNKNOWN"


# ---- the ledger -----------------------------------------------------------------------------

WEIRD = '/tmp/a b/it\'s "q"/c:d/tab\there/new\nline/back\\slash\\t'


def test_ledger_round_trip_with_weird_paths() -> None:
    entries = [
        LedgerEntry("12", "2026-11-29T02:42:33+00:00", "single", WEIRD, f"{WEIRD}/x-12.out"),
        LedgerEntry("13", "2026-11-29T02:43:00+01:00", "multiworker", "/w", "/w/x-13.out"),
    ]
    text = "".join(tracking.ledger_line(entry) for entry in entries)
    assert text.count("\n") == 2 and all(line.count("\t") == 4 for line in text.splitlines())
    assert tracking.parse_ledger(text) == entries


@pytest.mark.parametrize("line", ["12\tt\tsingle\t/w", "x\tt\tsingle\t/w\t/w/l", "\t\t\t\t"])
def test_a_damaged_ledger_line_is_refused_with_its_number(line: str) -> None:
    good = tracking.ledger_line(LedgerEntry("1", "t", "single", "/w", "/w/l"))
    with pytest.raises(ConfigError, match="^/s/jobs.tsv, line 2, is not a ledger line"):
        tracking.parse_ledger(good + line + "\n", "/s/jobs.tsv")


@pytest.mark.parametrize(
    ("environ", "path"),
    [
        ({"XDG_STATE_HOME": "/x", "HOME": "/h"}, "/x/ctrain/jobs.tsv"),
        ({"XDG_STATE_HOME": "", "HOME": "/h"}, "/h/.local/state/ctrain/jobs.tsv"),
        ({"HOME": "/h"}, "/h/.local/state/ctrain/jobs.tsv"),
    ],
)
def test_ledger_path(environ: dict[str, str], path: str) -> None:
    assert tracking.ledger_path(environ) == Path(path)


def test_submitted_log_from_the_rendered_script() -> None:
    script = jobs.render(JobRequest("single", ("python", "t.py")))
    assert tracking.submitted_log(script, "42", WEIRD) == f"{WEIRD}/ctrain-single-42.out"
    named = jobs.render(JobRequest("multiworker", ("python", "t.py"), job_name="mnist"))
    assert tracking.submitted_log(named, "7", "/w") == "/w/mnist-7.out"


@pytest.mark.parametrize(
    ("options", "log"),
    [
        ("", "/w/slurm-7.out"),
        ("#SBATCH --output=/abs/%x.%A.log\n#SBATCH --job-name=n\n", "/abs/n.7.log"),
        ("#SBATCH --output=100%%-%j-%N.out\n", "/w/100%-7-%N.out"),
        ("##SBATCH --output=off-%j.out\n", "/w/slurm-7.out"),
    ],
)
def test_submitted_log_patterns(options: str, log: str) -> None:
    assert tracking.submitted_log(f"#!/bin/bash\n{options}true\n", "7", "/w") == log


def test_ledger_fills_what_slurm_did_not_say() -> None:
    entry = LedgerEntry("2011", "t", "single", "/w", "/w/x-2011.out")
    ledger = {"2011": entry}
    assert tracking.with_ledger(BY_ID["2011"], ledger).log == "/w/x-2011.out"
    assert tracking.with_ledger(BY_ID["2012"], ledger) == BY_ID["2012"]
    assert tracking.from_ledger(entry) == JobState(
        "2011", "UNKNOWN", log="/w/x-2011.out", workdir="/w"
    )


# ---- output ---------------------------------------------------------------------------------


def test_table() -> None:
    states = [BY_ID["2011"], BY_ID["2023"]._replace(log="/w/rq 2023.out"), JobState("9", "UNKNOWN")]
    assert tracking.format_table(states) == (
        "JOBID  STATE      ELAPSED   NODES      RESTARTS  EXIT  LOG\n"
        "2011   COMPLETED  00:00:00  cn[01-03]  0         0:0   -\n"
        "2023   PENDING    00:00:00  -          1         0:0   /w/rq 2023.out\n"
        "9      UNKNOWN    -         -          0         -     -\n"
    )
    assert tracking.format_table([]) == "JOBID  STATE  ELAPSED  NODES  RESTARTS  EXIT  LOG\n"


def test_json() -> None:
    shown = json.loads(tracking.format_json([BY_ID["2023"]]))
    assert shown == [BY_ID["2023"]._asdict()] and shown[0]["restarts"] == 1


# ---- the commands ---------------------------------------------------------------------------


class FakeSlurm:
    """Slurm's programs as ``proc.run`` runs them: scontrol answers with ``lines`` (job id ->
    its line), sacct with ``sacct`` (exit code, stdout, stderr), sbatch prints job 4242, and
    scancel succeeds; every argv is recorded."""

    def __init__(self, lines: dict[str, str], sacct: tuple[int, str, str] = (1, "", "")) -> None:
        self.lines = lines
        self.sacct = sacct if sacct[0] == 0 or sacct[2] else (1, "", ACCOUNTING_DISABLED)
        self.argvs: list[list[str]] = []

    def __call__(
        self, argv: Sequence[str], env: object = None, timeout: float | None = 60
    ) -> subprocess.CompletedProcess[str]:
        argv = list(argv)
        self.argvs.append(argv)
        code, out, err = (0, "", "")  # scancel
        if argv[0] == "scontrol":
            code, out, err = self.scontrol(argv[4:])
        elif argv[0] == "sacct":
            code, out, err = self.sacct
        elif argv[0] == "sbatch":
            out = "4242\n"
        return subprocess.CompletedProcess(argv, code, out, err)

    def scontrol(self, ids: list[str]) -> tuple[int, str, str]:
        if not ids:
            return 0, "".join(self.lines.values()), ""
        line = self.lines.get(ids[0])
        return (0, line, "") if line else (1, "", UNKNOWN_ID)

    def ran(self, program: str) -> list[list[str]]:
        return [argv for argv in self.argvs if argv[0] == program]


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(cli_jobs, "_me", lambda: "root")
    return tmp_path / "state" / "ctrain" / "jobs.tsv"


def slurm(monkeypatch: pytest.MonkeyPatch, *ids: str, **kwargs: tuple[int, str, str]) -> FakeSlurm:
    fake = FakeSlurm({job: LINES[job] for job in ids}, **kwargs)
    monkeypatch.setattr(proc, "run", fake)
    return fake


def ctrain(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def write_ledger(path: Path, *entries: LedgerEntry) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(tracking.ledger_line(entry) for entry in entries))


def test_submit_appends_the_job_to_the_ledger(
    state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm(monkeypatch)
    for _ in range(2):
        done = ctrain("job", "submit", "single", "--runtime", "host", "--", "python", "t.py")
        assert done.exit_code == 0 and done.stdout == "4242\n", done.output
    first, second = tracking.parse_ledger(state_home.read_text())
    assert first.job_id == "4242" and first.mode == "single" and first.workdir == str(tmp_path)
    assert first.log == str(tmp_path / "ctrain-single-4242.out") and second.job_id == "4242"
    assert first.submitted[:2] == "20" and first.submitted[-6] in "+-"  # with its UTC offset


def test_submit_with_a_ledger_it_cannot_write_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "file"))
    slurm(monkeypatch)
    done = ctrain("job", "submit", "single", "--runtime", "host", "--", "python", "t.py")
    assert done.exit_code == 0 and done.stdout == "4242\n"
    assert done.stderr.startswith("ctrain: warning: job 4242 not recorded in ")


def test_status_from_the_controller_then_accounting_then_the_ledger(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = slurm(monkeypatch, "2012", "2011", "2022")  # scontrol lists all three
    write_ledger(state_home, LedgerEntry("3000", "t", "single", "/w", "/w/l-3000.out"))
    done = ctrain("job", "status", "3000", "2012")
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[1:] == [
        "3000   UNKNOWN  -         -      0         -     /w/l-3000.out",
        "2012   FAILED   00:00:00  vm     0         3:0   /tmp/trk/trkfail-2012.out",
    ]
    assert fake.ran("scontrol") == [tracking.scontrol_argv([])]
    assert fake.ran("sacct") == [tracking.sacct_argv(["3000"])]


def test_status_uses_accounting_where_it_is_enabled(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm(monkeypatch, sacct=(0, SACCT, ""))
    shown = json.loads(ctrain("job", "status", "--json", "2031").stdout)
    assert shown == [tracking.parse_sacct(SACCT)[1]._asdict()]


def test_status_without_ids_shows_the_last_of_the_ledger(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm(monkeypatch, "2020")
    ids = [str(job) for job in range(2001, 2026)]
    write_ledger(state_home, *(LedgerEntry(job, "t", "single", "/w", f"/w/{job}") for job in ids))
    shown = json.loads(ctrain("job", "status", "--json").stdout)
    assert [job["job_id"] for job in shown] == ids[-20:]
    assert {job["state"] for job in shown} == {"UNKNOWN", "RUNNING"}


@pytest.mark.parametrize(
    ("sacct", "said"),
    [((1, "", ""), "accounting is disabled here"), ((0, "", ""), "not to accounting")],
)
def test_a_job_known_nowhere_is_one_line(
    state_home: Path, monkeypatch: pytest.MonkeyPatch, sacct: tuple[int, str, str], said: str
) -> None:
    slurm(monkeypatch, sacct=sacct)
    done = ctrain("job", "status", "99")
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.startswith("ctrain: error: job 99 is not known: ") and said in done.stderr
    assert "Fix: check the id" in done.stderr and done.stderr.count("\n") == 1


def test_a_failing_sacct_is_an_error(state_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slurm(monkeypatch, sacct=(1, "", "sacct: error: Problem talking to the database\n"))
    done = ctrain("job", "status", "99")
    assert done.exit_code == 5 and "sacct failed: sacct: error: Problem talking" in done.stderr


def with_log(job: str, log: Path, state: str = "") -> str:
    """The golden line of ``job`` writing to ``log``, in ``state`` when given."""
    old = BY_ID[job]
    line = LINES[job].replace(f"StdOut={old.log}", f"StdOut={log}")
    return line.replace(f"JobState={old.state}", f"JobState={state or old.state}")


def test_logs_prints_the_log(
    state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "x.out"
    log.write_bytes(b"hi\n\xff\n")
    slurm(monkeypatch).lines["2012"] = with_log("2012", log)
    done = ctrain("job", "logs", "2012")
    assert done.exit_code == 0 and done.stdout_bytes == b"hi\n\xff\n" and done.stderr == ""


@pytest.mark.parametrize(
    ("job", "said"),
    [
        ("2021", "job 2021 is PENDING: its log {} does not exist yet Fix: follow it: ctrain job"),
        ("2012", "job 2012 ended (FAILED) and its log {} is gone Fix: look for it in the job's"),
    ],
)
def test_logs_of_a_missing_log(
    state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job: str, said: str
) -> None:
    slurm(monkeypatch).lines[job] = with_log(job, tmp_path / "x.out")
    done = ctrain("job", "logs", job)
    assert done.exit_code == 1 and said.format(tmp_path / "x.out") in done.stderr


def test_logs_of_a_job_without_a_known_log(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm(monkeypatch, "2011")
    done = ctrain("job", "logs", "2011")
    assert "neither Slurm nor ctrain's ledger knows where job 2011 writes" in done.stderr


def test_logs_follow_until_the_job_ends(
    state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pending without a log, running as the log grows, then completed with a last line that
    came before the state was read: all of it printed, and the end on stderr."""
    log = tmp_path / "x.out"
    fake = slurm(monkeypatch)
    fake.lines["2021"] = with_log("2021", log)
    steps: list[Callable[[], object]] = [
        lambda: log.write_text("hi\n"),
        lambda: fake.lines.update({"2021": with_log("2021", log, "RUNNING")}),
        lambda: log.write_text("hi\nmore\n"),
        lambda: (log.write_text("hi\nmore\nbye\n"), fake.lines.update(
            {"2021": with_log("2021", log, "COMPLETED")}
        )),
    ]  # fmt: skip
    monkeypatch.setattr("time.sleep", lambda seconds: steps.pop(0)())
    done = ctrain("job", "logs", "--follow", "2021")
    assert done.exit_code == 0 and done.stdout == "hi\nmore\nbye\n" and not steps
    assert (
        done.stderr
        == f"job 2021 is PENDING: waiting for {log}\njob 2021 ended: COMPLETED, exit 0:0\n"
    )
    assert all(argv == tracking.scontrol_argv(["2021"]) for argv in fake.ran("scontrol"))


def test_logs_follow_stopped_by_ctrl_c_leaves_the_job(
    state_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "x.out"
    log.write_text("hi\n")
    fake = slurm(monkeypatch)
    fake.lines["2020"] = with_log("2020", log)

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("time.sleep", interrupt)
    done = ctrain("job", "logs", "-f", "2020")
    assert done.exit_code == 130 and done.stdout == "hi\n" and not fake.ran("scancel")
    assert done.stderr == (
        "ctrain: error: stopped following job 2020's log (SIGINT); the job keeps running "
        "Fix: follow it again: ctrain job logs -f 2020; stop it: ctrain job cancel 2020\n"
    )


def test_cancel_cancels_ones_own_running_job(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = slurm(monkeypatch, "2020", "2012")
    done = ctrain("job", "cancel", "2020", "2012")
    assert done.exit_code == 0, done.output
    assert (
        done.stdout == "job 2020 cancelled (it was RUNNING)\njob 2012 has already ended: FAILED\n"
    )
    assert fake.ran("scancel") == [["scancel", "2020"]]


def test_cancel_refuses_a_job_of_another_user_and_cancels_none(
    state_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = slurm(monkeypatch, "2020", "2022")
    done = ctrain("job", "cancel", "2020", "2022")
    assert done.exit_code == 2 and not fake.ran("scancel") and done.stdout == ""
    assert done.stderr.startswith("ctrain: error: job 2022 is ctrain-test's, not yours (root): ")
