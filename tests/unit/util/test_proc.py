"""util/proc.py: a failed tool becomes one ExternalToolError with its last line and a fix."""

from __future__ import annotations

import sys

import pytest

from ctrain.errors import ExternalToolError
from ctrain.util import proc

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
