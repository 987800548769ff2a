"""util/proc.py: a failed tool becomes one ExternalToolError with its last line and a fix;
``which`` searches PATH as shutil.which does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctrain.errors import ExternalToolError
from ctrain.util import proc
from tests.support.helpers import SRC

PY = sys.executable


def test_last_line() -> None:
    assert proc.last_line("first\n  last  \n\n \n") == "last"
    assert proc.last_line("") == ""


def test_check_returns_stdout() -> None:
    assert proc.check([PY, "-c", "print('out')"]) == "out\n"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("import sys; print('noise', file=sys.stderr); sys.exit('bad input, line 3')",
         "the tool failed: bad input, line 3"),
        ("print('only stdout'); raise SystemExit(2)", "the tool failed: only stdout"),
        ("raise SystemExit(7)", "the tool failed: exit code 7"),
    ],
)  # fmt: skip
def test_check_raises_with_the_last_line_and_the_fix(code: str, message: str) -> None:
    with pytest.raises(ExternalToolError) as raised:
        proc.check([PY, "-c", code], what="the tool", fix="do this")
    assert (raised.value.message, raised.value.fix) == (message, "do this")


def test_check_defaults_name_the_program_and_the_command() -> None:
    with pytest.raises(ExternalToolError) as raised:
        proc.check([PY, "-c", "raise SystemExit(1)", "a b"])
    assert raised.value.message == f"{PY} failed: exit code 1"
    assert raised.value.fix == f"run it by hand: {PY} -c 'raise SystemExit(1)' 'a b'"


def test_missing_program_and_timeout() -> None:
    with pytest.raises(ExternalToolError, match="not found"):
        proc.check(["/nonexistent/tool"])
    with pytest.raises(ExternalToolError, match="did not finish within 0.5 s"):
        proc.check([PY, "-c", "import time; time.sleep(30)"], timeout=0.5)


def _program(directory: Path, name: str, mode: int = 0o755) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return path


def test_which_takes_the_first_executable_on_the_given_path(tmp_path: Path) -> None:
    _program(tmp_path / "a", "tool", mode=0o644)  # not executable: skipped
    (tmp_path / "b" / "tool").mkdir(parents=True)  # a directory: skipped
    wanted = _program(tmp_path / "c", "tool")
    _program(tmp_path / "d", "tool")
    path = ":".join(str(tmp_path / d) for d in ("a", "", "b", "c", "d"))
    env = {"PATH": path}
    assert proc.which("tool", env) == str(wanted) == shutil.which("tool", path=path)
    assert proc.which("missing", env) is None
    assert proc.which("tool", {"PATH": ""}) is None


def test_which_checks_a_path_as_given(tmp_path: Path) -> None:
    program = _program(tmp_path, "tool")
    assert proc.which(str(program), {"PATH": ""}) == str(program)
    assert proc.which(str(tmp_path / "nope"), {}) is None
    assert proc.which(str(tmp_path), {}) is None


def test_exec_replace_keeps_the_pid_and_the_exit_code() -> None:
    """The command replaces the process (Slurm's signals reach it): `echo $$` in the exec'd
    shell prints the pid the Python process had, and its exit code is the process's."""
    program = (
        "import os; from ctrain.util import proc; print(os.getpid(), flush=True); "
        "proc.exec_replace(['sh', '-c', 'echo $$; exit 7'], {'PATH': os.defpath})"
    )
    env = {"PATH": os.defpath, "PYTHONPATH": SRC}
    done = subprocess.run(
        [PY, "-c", program], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    before, after = done.stdout.split()
    assert before == after
    assert done.returncode == 7
