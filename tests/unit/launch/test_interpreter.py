"""What the launcher's interpreter holds (launch/interpreter.py), read from this very interpreter
and checked against importlib's own answers, and how --explain shows it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import pytest

import ctrain
from ctrain.launch import interpreter, start
from ctrain.launch.plan import LaunchOptions


def test_this_interpreters_versions_are_its_distributions() -> None:
    holds = dict(interpreter.this_interpreter({}).modules)
    assert holds["tensorflow"] == importlib.metadata.version("tensorflow")
    assert holds["tf_keras"] == importlib.metadata.version("tf-keras")
    assert holds["keras"] == importlib.metadata.version("keras")
    assert holds["horovod"] == importlib.metadata.version("horovod")


def test_a_missing_module_and_one_without_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "horovod" else real(name)
    )
    assert interpreter.version("horovod", {"horovod": ["horovod"]}) is None
    assert interpreter.version("ctrain", {}) == interpreter.UNKNOWN  # found, no dist named
    assert interpreter.version("ctrain", {"ctrain": ["ctrain-hpc"]}) == ctrain.__version__


def test_the_copy_and_the_interpreter_carried_or_installed() -> None:
    here = interpreter.this_interpreter({})
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert here.python == f"{sys.executable} (Python {version})"
    assert here.ctrain.endswith("(installed beside this Python)")
    said = "/usr/bin/python3 (Python 3.12, the command's interpreter)"
    carried = interpreter.this_interpreter({"CTRAIN_CARRIED": said})
    assert carried.python == said and carried.ctrain.endswith("(carried from the host)")


def test_explain_shows_it_after_the_banner_and_in_json() -> None:
    plan = start.prepare(LaunchOptions(), {}, ["python", "t.py"])
    holds = interpreter.Holds(
        "/p (Python 3.12)", "0.1.0 from /c", (("tensorflow", "2.17.0"), ("horovod", None))
    )
    text = start.explain(plan, False, None, holds).splitlines()
    assert text[1:4] == [
        "  python /p (Python 3.12)",
        "  ctrain 0.1.0 from /c",
        "  holds tensorflow 2.17.0, horovod missing",
    ]
    shown = start.explain(plan, True, None, holds)
    assert '"holds": {\n      "tensorflow": "2.17.0",\n      "horovod": null' in shown


def test_the_command_runs_on_this_interpreter_when_its_program_is_this_one(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    (bin_dir / "notes").write_text("")  # not a program
    path = {"PATH": f"{tmp_path}/none:{bin_dir}"}
    runs = interpreter.runs_this_interpreter
    assert runs(["python3", "t.py"], path, str(python))
    assert runs([str(python), "t.py"], {}, str(python))
    assert runs([f"{bin_dir}/../bin/python3"], {}, str(python))  # the same path, spelled so
    assert not runs(["python3", "t.py"], {"PATH": "/nowhere"}, str(python))
    assert not runs(["python", "t.py"], path, str(python))
    assert not runs(["notes"], path, str(bin_dir / "notes"))
    assert not runs([], path, str(python))
