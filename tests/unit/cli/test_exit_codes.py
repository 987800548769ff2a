"""The exit codes of the reference page (generated from ctrain.errors for the site), code by
code, each from a real command line: the code, and for an error one ``ctrain: error: ... Fix:
...`` line and no traceback. A code added without a case here fails; codes only a training run
can show name the test that shows them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN, REPO, SRC, SYSTEM_PATH, docs_reference

TIMEOUT = 120
# A training script's use of ctrain's checkpoint API (no TensorFlow): resume from a checkpoint
# of another training configuration.
OTHER_CONFIG = """
from ctrain.train import checkpoints as ck
model = {"layers": [8, 8]}
ck.write("ckpt", 1, 0, ck.fingerprint(model, {"lr": 0.1}), lambda p: open(f"{p}.x", "w").close())
ck.check(ck.latest("ckpt"), ck.fingerprint(model, {"lr": 0.2}))
"""
# code: (argv, the environment on top of a minimal one, a phrase of the error line)
CASES: dict[int, tuple[list[str], dict[str, str], str]] = {
    0: ([CTRAIN, "--version"], {}, ""),
    # Debian's Python has neither TensorFlow nor Horovod: doctor's checks fail.
    1: (["/usr/bin/python3", "-m", "ctrain", "doctor"], {"PYTHONPATH": SRC}, ""),
    2: ([CTRAIN, "exec", "--bogus"], {}, "No such option '--bogus'"),
    3: (
        [CTRAIN, "launch", "--explain"],
        {"SLURM_JOB_ID": "1", "SLURM_NTASKS": "x", "SLURM_JOB_NODELIST": "n1"},
        "SLURM_NTASKS='x' is not a whole number",
    ),
    4: (
        [CTRAIN, "launch", "--", "true"],
        {"SLURM_JOB_ID": "9", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n1"},
        "outside any srun step",
    ),
    5: (
        [CTRAIN, "exec", "--runtime", "apptainer", "img.sif", "--", "true"],
        {},  # PATH without apptainer
        "no container runtime found on PATH",
    ),
    6: ([sys.executable, "-c", OTHER_CONFIG], {}, "different training configuration"),
    7: ([CTRAIN, "examples", "copy", "/proc/ctrain-test"], {}, "No such file or directory"),
    # A job script's check after a step a SIGKILL ended, with no fault retries to spend.
    8: (
        [CTRAIN, "job", "preflight", "137"],
        {
            "SLURM_JOB_ID": "5",
            "SLURM_JOB_NODELIST": "n[1-2]",
            "CTRAIN_PREFLIGHT": "0",
            "CTRAIN_FAULT_RETRIES": "0",
            "SLURM_SUBMIT_DIR": "/proc/ctrain-test",
        },
        "the job's fault retries are spent",
    ),  # fmt: skip
}
# Codes a command line alone cannot reach: the test that shows each.
ELSEWHERE = {
    75: "tests/integration/test_preemption_real.py::"
    "test_single_stopped_twice_ends_with_the_uninterrupted_weights",
    124: "tests/integration/test_watchdog_real.py::"
    "test_a_stopped_rank_leaves_the_other_stuck_and_its_watchdog_ends_the_step",
    130: "tests/unit/cli/test_cli.py::test_ctrl_c_is_one_line_and_130",
}


def table_codes() -> list[int]:
    page = docs_reference().exit_codes_page()
    table = page[page.index("| exit code | meaning |") :].split("\n\n", 1)[0]
    return sorted({int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)})


def test_every_row_of_the_table_has_a_case() -> None:
    assert sorted([*CASES, *ELSEWHERE]) == table_codes()


@pytest.mark.parametrize("code", list(ELSEWHERE))
def test_the_tests_named_for_the_other_codes_exist(code: int) -> None:
    path, _, name = ELSEWHERE[code].partition("::")
    assert f"def {name}" in (REPO / path).read_text()


@pytest.mark.parametrize("code", list(CASES))
def test_the_exit_code_of_a_real_command_line(code: int, tmp_path: Path) -> None:
    argv, extra, said = CASES[code]
    env = {"PATH": SYSTEM_PATH, "HOME": str(tmp_path), **extra}
    done = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    if said:
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("ctrain: error: "), done.stderr
        assert said in lines[0] and " Fix: " in lines[0], lines[0]
