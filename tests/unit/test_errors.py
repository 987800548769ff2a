"""The error family: the exit-code reference page the site generates lists every code of
ctrain.errors and no other, each error prints one line, and an OSError becomes an error that
names the file."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from ctrain import errors
from tests.support.helpers import REPO, docs_reference


def page_exit_codes() -> dict[int, set[str]]:
    """The generated exit-code page's table: code -> the names in its `ctrain.errors` column."""
    lines = docs_reference().exit_codes_page().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| exit code |"))
    table: dict[int, set[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        code, names = line.split(" | ")[0].strip("| "), line.rsplit(" | ", 1)[-1]
        table.setdefault(int(code), set()).update(re.findall(r"`(\w+)`", names))
    return table


def code_exit_codes() -> dict[int, set[str]]:
    """Every exit code ctrain.errors defines: its error classes', REQUEUE_EXIT_CODE and
    STALLED_EXIT_CODE."""
    found: dict[int, set[str]] = {
        0: set(),
        errors.REQUEUE_EXIT_CODE: {"REQUEUE_EXIT_CODE"},
        errors.STALLED_EXIT_CODE: {"STALLED_EXIT_CODE"},
    }
    for name, value in vars(errors).items():
        if isinstance(value, type) and issubclass(value, errors.CtrainError):
            found.setdefault(value.exit_code, set()).add(name)
    return found


def test_the_exit_code_page_is_errors_py() -> None:
    assert page_exit_codes() == code_exit_codes()


def test_line_is_one_line_with_the_fix() -> None:
    error = errors.ConfigError("bad value\n  for mode", "use auto")
    assert error.line() == "ctrain: error: bad value for mode Fix: use auto"


def test_line_without_fix() -> None:
    assert errors.CtrainError("it broke").line() == "ctrain: error: it broke"


def test_oserror_names_the_file_and_the_reason(tmp_path: Path) -> None:
    with pytest.raises(OSError) as raised:
        (tmp_path / "missing" / "x.sbatch").write_text("")
    error = errors.FileAccessError.from_oserror(raised.value)
    assert error.exit_code == 7
    assert error.message == f"{tmp_path / 'missing' / 'x.sbatch'}: No such file or directory"
    assert "create the missing directory" in error.fix


def test_oserror_with_two_files_and_an_unusual_errno() -> None:
    exc = OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b")
    error = errors.FileAccessError.from_oserror(exc)
    assert error.message == "/a -> /b: Invalid cross-device link"
    assert error.fix.startswith("check the path")


def test_oserror_without_a_file() -> None:
    error = errors.FileAccessError.from_oserror(OSError(errno.ENOSPC, "No space left on device"))
    assert error.line().startswith("ctrain: error: No space left on device Fix: free space")


def test_requeue_exit_code_has_one_value_everywhere() -> None:
    import ctrain.train.checkpoints

    assert ctrain.train.checkpoints.REQUEUE_EXIT_CODE == errors.REQUEUE_EXIT_CODE
    templates = sorted((REPO / "jobs").glob("*.sbatch"))
    assert templates
    for template in templates:  # the job scripts cannot import it: they say it literally
        lines = template.read_text(encoding="utf-8").splitlines()
        assert f"requeue_exit={errors.REQUEUE_EXIT_CODE}" in lines, template.name


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM])
def test_permission_denied_says_what_to_do(code: int) -> None:
    error = errors.FileAccessError.from_oserror(OSError(code, "Permission denied", "/etc/x"))
    assert error.line() == (
        "ctrain: error: /etc/x: Permission denied Fix: give a path you may write (or read), "
        "or change its permissions"
    )
