"""Errors a user can act on: every ``ctrain: error:`` line ends in a fix.

Every construction of a CtrainError class in src/ctrain (read from each module's syntax tree)
passes a fix that is not empty: the second positional argument or ``fix=``; a variable, a call
or an f-string counts (the message built elsewhere and passed through), a missing fix or a
literal "" does not. Click's own usage errors take the same road (ctrain.cli.usage_error)."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from ctrain import errors
from tests.support.helpers import REPO, run_ctrain, sandbox

SRC = REPO / "src" / "ctrain"


def error_classes() -> set[str]:
    """The names of CtrainError and every class under it."""
    found, todo = set(), [errors.CtrainError]
    while todo:
        cls = todo.pop()
        found.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return found


def called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def empty(node: ast.expr) -> bool:
    """A literal that says nothing: "" (or an f-string of no parts), None."""
    if isinstance(node, ast.Constant):
        return node.value is None or (isinstance(node.value, str) and not node.value.strip())
    return isinstance(node, ast.JoinedStr) and not node.values


def has_fix(call: ast.Call) -> bool:
    """Whether ``call`` passes a fix (``*args`` or ``**kwargs``: built elsewhere, accepted)."""
    passed_on = [arg for arg in call.args if isinstance(arg, ast.Starred)]
    if passed_on or any(keyword.arg is None for keyword in call.keywords):
        return True
    fix = call.args[1] if len(call.args) >= 2 else None
    fix = next((k.value for k in call.keywords if k.arg == "fix"), fix)
    return fix is not None and not empty(fix)


def offenders(text: str, where: str) -> list[str]:
    """``where:LINE: Name(...)`` for each construction of an error class without a fix."""
    names = error_classes()
    return [
        f"{where}:{node.lineno}: {called_name(node)}(...)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Call) and called_name(node) in names and not has_fix(node)
    ]


def test_every_error_ctrain_raises_has_a_fix() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        found += offenders(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    assert found == [], "errors without a fix:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "bad"),
    [
        ('raise ConfigError("no")', True),
        ('raise ConfigError("no", "")', True),
        ('raise errors.SpecError("no", fix="  ")', True),
        ('raise ConfigError(f"no {x}", f"")', True),
        ("raise LaunchError(message)", True),
        ('raise ConfigError("no", "pass --mode")', False),
        ("raise ExternalToolError(msg, fix)", False),
        ('raise DataError("no", fix=f"mkdir {d}")', False),
        ("raise ExternalToolError(*parts)", False),
        ('raise ValueError("not ours")', False),
    ],
)
def test_the_audit_tells_a_missing_fix(source: str, bad: bool) -> None:
    assert bool(offenders(source, "x.py")) == bad


@pytest.mark.parametrize(
    "args",
    [
        ("no-such-command",),
        ("pull", "--no-such-option"),
        ("exec", "--runtime", "nonsense", "img", "--", "true"),
        ("job", "render"),
        ("config",),
    ],
)
def test_clicks_usage_errors_end_in_a_fix(tmp_path: Path, args: tuple[str, ...]) -> None:
    done: subprocess.CompletedProcess[str] = run_ctrain(*args, env=sandbox(tmp_path).env)
    if done.returncode == 0:  # a group without a command prints its help: nothing to fix
        assert "Usage:" in done.stdout
        return
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctrain: error: "), done.stderr
    assert " Fix: see `ctrain" in lines[0] and lines[0].endswith("--help`")
