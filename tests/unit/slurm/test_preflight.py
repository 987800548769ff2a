"""The preflight of a job's nodes (slurm/preflight.py): each check from what a node found, the
step's output read back, which nodes fail, and the job's verdict with its record of retries.
(The real step on the three compute hosts is in tests/integration/test_node_faults_real.py.)"""

from __future__ import annotations

import dataclasses
import errno
from pathlib import Path

import pytest

from ctrain.checkline import Check
from ctrain.errors import NodeFaultError
from ctrain.launch.gpus import Gpu
from ctrain.settings_table import Settings
from ctrain.slurm import preflight
from ctrain.slurm.faults import Retries, Retry
from ctrain.util.fs import GIB

TWO = (Gpu("0", "A100"), Gpu("1", "A100"))
PASS = [Check("gpus", "PASS", "none given to this node")]


@pytest.mark.parametrize(
    ("wanted", "listed", "status"),
    [(0, (), "PASS"), (0, None, "PASS"), (2, TWO, "PASS"), (1, TWO, "PASS"), (2, TWO[:1], "FAIL"),
     (2, None, "FAIL"), (2, (), "FAIL")],
)  # fmt: skip
def test_the_gpus_slurm_gave(wanted: int, listed: tuple[Gpu, ...] | None, status: str) -> None:
    assert preflight.gpu_check(wanted, listed).status == status


@pytest.mark.parametrize(
    ("environ", "count"),
    [({}, 0), ({"SLURM_STEP_GPUS": "2,3"}, 2), ({"CUDA_VISIBLE_DEVICES": "0"}, 1),
     ({"SLURM_STEP_GPUS": "", "CUDA_VISIBLE_DEVICES": "0,1"}, 0)],
)  # fmt: skip
def test_the_gpus_given_to_the_node(environ: dict[str, str], count: int) -> None:
    assert preflight.given_gpus(environ) == count


def test_a_directory_with_room_passes_and_one_without_fails() -> None:
    here = Path("/scratch/job")
    assert preflight.dir_check("job directory", here, 3 * GIB, 2).status == "PASS"
    low = preflight.dir_check("job directory", here, GIB // 2, 2)
    assert (low.status, low.detail) == ("FAIL", "/scratch/job: 512.0 MiB free, under 2 GiB")
    denied = preflight.dir_check("job directory", here, OSError(errno.EROFS, "Read-only"), 1)
    assert (denied.status, denied.detail) == ("FAIL", "/scratch/job: cannot write: Read-only")


def test_probing_a_directory_leaves_nothing_behind(tmp_path: Path) -> None:
    free = preflight.probe_dir(tmp_path)
    assert isinstance(free, int) and free > 0
    assert list(tmp_path.iterdir()) == []
    missing = preflight.probe_dir(tmp_path / "gone")
    assert isinstance(missing, OSError) and missing.errno == errno.ENOENT


def test_the_step_output_is_read_back_past_other_lines() -> None:
    lines = [
        "srun: error: Task launch for StepId=9.1 failed on node cn02",
        preflight.report_line("cn01", PASS),
        preflight.MARK + "{not json",
        preflight.report_line("cn03", [Check("job directory", "FAIL", "/x: cannot write", "f")]),
    ]
    found = preflight.parse_reports("\n".join(lines))
    assert found == {
        "cn01": PASS,
        "cn03": [Check("job directory", "FAIL", "/x: cannot write", "f")],
    }
    bad, reasons = preflight.judge(["cn01", "cn02", "cn03"], found)
    assert bad == ["cn02", "cn03"]
    assert reasons == "cn02 did not answer; cn03: job directory: /x: cannot write"
    log = preflight.log_lines(["cn01", "cn02", "cn03"], found)
    assert log[0] == "ctrain job: preflight of 3 node(s), 2 answered"
    assert [line.split(":")[0].strip() for line in log[1:]] == ["cn02", "cn03"]


def test_the_step_is_one_task_per_node_beside_any_other() -> None:
    argv = preflight.step_argv("/v/bin/python", 3, Path("/job"), 2)
    assert argv[:6] == ["srun", "--overlap", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1",
                        "--kill-on-bad-exit=0"]  # fmt: skip
    assert argv[6:] == ["/v/bin/python", "-m", "ctrain.slurm.preflight", "/job", "2"]


def test_a_node_reports_its_own_name_and_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLURMD_NODENAME", "cn07")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("SLURM_STEP_GPUS", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert preflight.main([str(tmp_path), "1"]) == 0
    found = preflight.parse_reports(capsys.readouterr().out)
    assert [c.name for c in found["cn07"]] == ["gpus", "job directory", "temporary directory"]
    assert {c.status for c in found["cn07"]} == {"PASS"}


def job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A job's environment with no scontrol on PATH (it says nothing then)."""
    return {
        "PATH": str(tmp_path),
        "SLURM_JOB_ID": "41",
        "SLURM_JOB_NODELIST": "cn[01-03]",
        "SLURM_SUBMIT_DIR": str(tmp_path),
        "SLURM_RESTART_COUNT": "2",
        **extra,
    }


OFF = dataclasses.replace(Settings(), preflight=False, fault_retries=2)


def test_a_requeue_is_recorded_and_counted_against_the_budget(tmp_path: Path) -> None:
    verdict, lines = preflight.job_verdict(job_env(tmp_path), OFF, tmp_path, 137)
    assert verdict.line() == "requeue"
    record = preflight.retries_path(tmp_path, "41")
    assert record == tmp_path / ".ctrain" / "job-41.json"
    assert Retries.from_json(record.read_text()).retries == (
        Retry(2, (), "a rank was ended by SIGKILL (exit code 137)"),
    )
    assert lines[0] == "ctrain job: fault retries used: 0 of 2"
    preflight.job_verdict(job_env(tmp_path), OFF, tmp_path, 124)
    with pytest.raises(NodeFaultError, match="fault retries are spent"):
        preflight.job_verdict(job_env(tmp_path), OFF, tmp_path, 137)
    assert len(Retries.from_json(record.read_text()).retries) == 2  # the refused one is not kept


def test_nothing_is_recorded_when_the_job_goes_on_or_ends(tmp_path: Path) -> None:
    for code in (None, 1):
        preflight.job_verdict(job_env(tmp_path), OFF, tmp_path, code)
    assert not (tmp_path / ".ctrain").exists()


def test_a_damaged_record_is_one_line_with_its_fix(tmp_path: Path) -> None:
    record = preflight.retries_path(tmp_path, "41")
    record.parent.mkdir()
    record.write_text("{")
    with pytest.raises(Exception, match="cannot be read") as raised:
        preflight.job_verdict(job_env(tmp_path), OFF, tmp_path, 137)
    assert "remove it" in getattr(raised.value, "fix", "")


def test_outside_a_job_it_says_where_it_runs(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="SLURM_JOB_ID or SLURM_JOB_NODELIST is not set"):
        preflight.job_verdict({}, OFF, tmp_path, None)


def test_the_first_failure_is_read_from_the_end_of_this_run_s_log(tmp_path: Path) -> None:
    log = tmp_path / "job-41.out"
    earlier = "ctrain job 41 run 1 on cn[01-02]: python t.py\nsrun: error: cn01: task 0: Killed\n"
    now = "ctrain job 41 run 2 on cn[01-02]: python t.py\n"
    failed = "srun: error: cn02: task 1: Exited with exit code 3\n"
    log.write_text(earlier + "x" * preflight.LOG_TAIL + now + failed)
    first = preflight.first_failure({"StdErr": str(log)}, "41", 2)
    assert first is not None and (first.node, first.exit_code) == ("cn02", 3)
    assert preflight.first_failure({"StdErr": str(log)}, "41", 1) is None  # past the tail read
    assert preflight.first_failure({"StdErr": str(tmp_path / "gone")}, "41", 2) is None
    assert preflight.first_failure({}, "41", 2) is None
