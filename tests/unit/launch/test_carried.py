"""The carried launcher's entry (launch/carried.py): its command line, and a real start of it in
a fresh interpreter, as boot.sh starts it: the same one-line errors as ``ctrain launch``, and
none of the modules a rank's start is kept from reading in the image."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctrain.errors import UsageError
from ctrain.launch.carried import parse

RUN = (
    "import json, sys\n"
    "from ctrain.launch import carried\n"
    "try:\n"
    "    carried.main(sys.argv[1:])\n"
    "finally:\n"
    "    print(json.dumps(sorted(sys.modules)), file=sys.stdout)\n"
)
# What a rank's start must not read from the image: Click and the modules it imports, the
# distributions' metadata (GPUs or --explain alone), the compressors shutil imports, TOML (a
# config file alone)
KEPT_OUT = ("click", "uuid", "importlib.metadata", "shutil", "bz2", "lzma", "tomllib")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--", "python", "t.py"], (False, ("python", "t.py"))),
        (["--explain", "--", "python", "t.py"], (True, ("python", "t.py"))),
        (["--", "--explain"], (False, ("--explain",))),
        (["--"], (False, ())),
    ],
)
def test_the_command_line(argv: list[str], expected: tuple[bool, tuple[str, ...]]) -> None:
    assert parse(argv) == expected


@pytest.mark.parametrize(
    "argv", [[], ["python", "t.py"], ["--explain"], ["--json", "--", "x"], ["--explain", "x"]]
)
def test_anything_else_is_refused(argv: list[str]) -> None:
    with pytest.raises(UsageError) as refused:
        parse(argv)
    assert refused.value.fix == "run it through ctrain exec"


def start(
    tmp_path: Path, *argv: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    environ = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", RUN, *argv],
        env={**environ, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, set(json.loads(done.stdout.splitlines()[-1]))


def test_a_start_up_to_the_exec_reads_none_of_the_modules_kept_out(tmp_path: Path) -> None:
    """The exec itself fails here (no such program), so the process lives on to say what it
    imported by then: everything a rank's start reads before its command runs."""
    done, modules = start(tmp_path, "--", "/no/such/program")
    assert done.returncode == 5, done.stderr  # ExternalToolError's
    assert done.stderr.strip().splitlines()[-1] == (
        "ctrain: error: cannot run /no/such/program: No such file or directory Fix: check the "
        "command"
    )
    assert "ctrain.launch.start" in modules
    assert [name for name in KEPT_OUT if name in modules] == []


def test_a_launch_error_is_ctrain_launchs_one_line(tmp_path: Path) -> None:
    slurm = {"SLURM_JOB_ID": "9", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n1"}
    done, _ = start(tmp_path, "--", "true", **slurm)
    assert done.returncode == 4
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith("ctrain: error: ") and "launch it with srun" in line


def test_a_usage_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done, _ = start(tmp_path, "python", "t.py")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "ctrain: error: the carried ctrain launch takes [--explain] -- COMMAND... Fix: run it "
        "through ctrain exec"
    )
