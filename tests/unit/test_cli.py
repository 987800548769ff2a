"""The CLI surface: version, help on every command, errors as one line, no TensorFlow import."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from ctrain import __version__
from ctrain.cli import main

COMMANDS = [
    "exec",
    "run",
    "shell",
    "pull",
    "build",
    "overlay",
    "cache",
    "launch",
    "job",
    "data",
    "bench",
    "doctor",
    "config",
]


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"], catch_exceptions=False)
    assert result.output.strip() == f"ctrain, version {__version__}"


def test_python_dash_m() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ctrain", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and __version__ in done.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_on_every_command(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "Usage:" in result.output


def test_launch_help_names_env_vars() -> None:
    text = CliRunner().invoke(main, ["launch", "--help"], catch_exceptions=False).output
    for var in (
        "CTRAIN_MODE",
        "CTRAIN_COLLECTIVE",
        "CTRAIN_COLLECTIVE_TIMEOUT",
        "CTRAIN_PORT_BASE",
    ):
        assert var in text


def test_every_command_group_is_there() -> None:
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name


def test_cli_and_launch_never_import_tensorflow() -> None:
    code = (
        "import sys, json\n"
        "from click.testing import CliRunner\n"
        "from ctrain.cli import main\n"
        "r = CliRunner().invoke(main, ['launch', '--explain', '--json'], catch_exceptions=False)\n"
        "assert r.exit_code == 0, r.output\n"
        "json.loads(r.output)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorflow', 'horovod', 'keras', 'tf_keras', 'numpy'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PATH": ""}
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_launch_error_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "SLURM_JOB_ID": "9",
        "SLURM_NTASKS": "4",
        "SLURM_JOB_NODELIST": "n1",
    }.items():
        monkeypatch.setenv(key, value)
    result = CliRunner().invoke(main, ["launch", "--", "true"])
    assert result.exit_code == 4
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "launch it with srun" in lines[0]


def test_malformed_slurm_variable_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "9")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-")
    result = CliRunner().invoke(main, ["launch", "--explain"])
    assert result.exit_code == 3
    assert "SLURM_JOB_NODELIST" in result.output and "Traceback" not in result.output
