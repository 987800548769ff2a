"""The CLI surface: version, help on every command, errors as one line, no TensorFlow import."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE

import click
import pytest
from click.testing import CliRunner

from ctrain import __version__
from ctrain.cli import COMMANDS as COMMAND_MODULES
from ctrain.cli import main
from ctrain.errors import FileAccessError, Interrupted, UsageError
from tests.support import fake_apptainer
from tests.support.helpers import REPO, run_ctrain, wait_for

COMMANDS = [
    "exec",
    "run",
    "shell",
    "carried",
    "pull",
    "push",
    "resolve",
    "build",
    "overlay",
    "cache",
    "launch",
    "job",
    "remote",
    "data",
    "bench",
    "examples",
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


def test_job_help_lists_the_modes_and_runtimes() -> None:
    text = CliRunner().invoke(main, ["job", "render", "--help"], catch_exceptions=False).output
    assert "{single|mirrored|multiworker|horovod-" in text
    assert "[auto|apptainer|singularity|charliecloud|docker|podman|pyxis|host]" in text


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


def ctrain(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a fresh interpreter, stdout and stderr apart."""
    return run_ctrain(*args, env=os.environ if env is None else env, timeout=60)


def the_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failure prints: on stderr, alone, with a fix; nothing on stdout."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ctrain: error: ") and " Fix: " in lines[0], lines[0]
    assert done.stdout == ""
    return lines[0]


@pytest.mark.parametrize(
    ("args", "words", "command"),
    [
        (["launch", "--mode", "bogus"], "'bogus' is not one of", "ctrain launch"),
        (
            ["job", "render", "mirrored", "--nodes", "x", "--", "python", "t.py"],
            "Invalid value for '--nodes'",
            "ctrain job render",
        ),
        (["pull", "--bogus"], "No such option '--bogus'", "ctrain pull"),
        (["build"], "Missing argument 'RECIPE'", "ctrain build"),
        (["overlay", "create", "--size"], "'--size' requires an argument", "ctrain overlay create"),
        (["bogus"], "No such command 'bogus'", "ctrain"),
        (["job", "submit", "bogus"], "'bogus' is not one of 'single'", "ctrain job submit"),
        (["job", "render"], "Choose from: single, mirrored,", "ctrain job render"),
    ],
)
def test_usage_errors_are_one_line_naming_the_help(
    args: list[str], words: str, command: str
) -> None:
    done = ctrain(*args)
    line = the_error_line(done)
    assert done.returncode == UsageError.exit_code == 2
    assert words in line and line.endswith(f"Fix: see `{command} --help`")


@pytest.mark.parametrize(
    ("save", "reason"),
    [("missing/x.sbatch", "No such file or directory"), ("file/x.sbatch", "Not a directory")],
)
def test_an_oserror_is_one_line_naming_the_file(tmp_path: Path, save: str, reason: str) -> None:
    (tmp_path / "file").write_text("")
    path = tmp_path / save
    done = ctrain("job", "submit", "single", "--save", str(path), "--", "python", "t.py")
    assert the_error_line(done).startswith(f"ctrain: error: {path}: {reason} Fix: ")
    assert done.returncode == FileAccessError.exit_code == 7


def test_ctrl_c_is_one_line_and_130(tmp_path: Path) -> None:
    started = tmp_path / "sbatch-started"
    (tmp_path / "sbatch").write_text(f'#!/bin/sh\ntouch "{started}"\nexec sleep 60\n')
    (tmp_path / "sbatch").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv = [sys.executable, "-m", "ctrain", "job", "submit", "single", "--", "python", "t.py"]

    def as_from_a_terminal() -> None:
        """SIGINT's default disposition: run as a background job of a non-interactive shell (CI
        started with `&`), the tests inherit it ignored, and Python then takes no Ctrl-C."""
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    with subprocess.Popen(
        argv, env=env, stdout=PIPE, stderr=PIPE, text=True, preexec_fn=as_from_a_terminal
    ) as child:
        wait_for(started.exists, "the fake sbatch to start", timeout=30)
        child.send_signal(signal.SIGINT)
        stdout, stderr = child.communicate(timeout=30)
    done = subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)
    assert "interrupted" in the_error_line(done)
    assert done.returncode == Interrupted.exit_code == 130


@pytest.mark.parametrize(
    ("line", "edited", "said"),
    [
        ("#SBATCH --signal", None, "no #SBATCH --signal= line"),
        ("#SBATCH --nodes=", "#SBATCH --nodes=2-4", "#SBATCH --nodes=2-4 is not a whole number"),
        ("#SBATCH --cpus-per-task=", "#SBATCH --cpus-per-task=x", "#SBATCH --cpus-per-task=x is"),
        ("default_image=", "default_image=", "default_image= is empty"),
        ("default_image=", "default_image='a b", "default_image='a b: No closing quotation"),
    ],
)
def test_a_damaged_job_template_is_one_line(
    tmp_path: Path, line: str, edited: str | None, said: str
) -> None:
    """A template from $CTRAIN_JOBS_DIR is something the user gave: exit 2, one line."""
    template = (REPO / "jobs" / "single.sbatch").read_text(encoding="utf-8")
    lines = template.splitlines()
    (index,) = [i for i, text in enumerate(lines) if text.startswith(line)]
    lines[index : index + 1] = [edited] if edited is not None else []
    (tmp_path / "single.sbatch").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**os.environ, "CTRAIN_JOBS_DIR": str(tmp_path)}
    done = ctrain("job", "render", "single", "--", "python", "t.py", env=env)
    assert f"jobs/single.sbatch is damaged: {said}" in the_error_line(done)
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_a_jobs_dir_without_templates_is_a_setting_error(tmp_path: Path) -> None:
    env = {**os.environ, "CTRAIN_JOBS_DIR": str(tmp_path)}
    done = ctrain("job", "render", "single", "--", "python", "t.py", env=env)
    assert "holds no job templates" in the_error_line(done) and done.returncode == 2


def test_a_library_error_is_one_line() -> None:
    done = ctrain("overlay", "create")
    assert the_error_line(done).startswith("ctrain: error: overlay create needs a PATH")
    assert done.returncode == 2


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["job", "--help"], ["config", "show"]])
def test_help_version_and_success_exit_0(args: list[str]) -> None:
    done = ctrain(*args)
    assert done.returncode == 0 and done.stdout and done.stderr == ""


def ctrain_modules_after(args: list[str], env: dict[str, str] | None = None) -> list[str]:
    """The ctrain modules imported by running ``ctrain ARGS`` (to a successful end)."""
    code = (
        "import sys\n"
        "from ctrain.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'ctrain')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1].split()


@pytest.mark.parametrize("runtime", ["apptainer", "host"])
def test_exec_of_a_local_image_imports_one_adapter_and_no_pull(
    runtime: str, tmp_path: Path
) -> None:
    """Start-up is part of every exec: the runtime's adapter alone, none of the pull machinery
    (benchmarks/apptainer_exec.py measures it)."""
    box = fake_apptainer.with_standin(tmp_path)
    image = tmp_path / "img.sif"
    fake_apptainer.make_sif(image, {})
    args = ["exec", "--runtime", runtime, "--dry-run", "--no-launch", str(image), "--", "true"]
    modules = ctrain_modules_after(args, box.env)
    adapters = [m for m in modules if m.startswith("ctrain.container.")]
    assert sorted(adapters) == sorted(
        ["ctrain.container.carry", "ctrain.container.runtimes", "ctrain.container.spec"]
        + [f"ctrain.container.{runtime}"]
    )
    assert [m for m in modules if m.startswith("ctrain.images.")] == ["ctrain.images.resolve"]


def test_version_imports_only_the_root() -> None:
    assert ctrain_modules_after(["--version"]) == ["ctrain", "ctrain.cli", "ctrain.errors"]


def test_help_imports_the_command_modules_and_no_library_module() -> None:
    """Beyond the command modules, only the ground floor the options are made from: the rows
    (ctrain.settings_table) and what they import (ctrain.names, ctrain.profile_window)."""
    modules = ctrain_modules_after(["--help"])
    assert [m for m in modules if not m.startswith("ctrain.cli.")] == [
        "ctrain",
        "ctrain.cli",
        "ctrain.errors",
        "ctrain.names",
        "ctrain.profile_window",
        "ctrain.settings_table",
    ]
    assert {m.split(":")[0] for m in COMMAND_MODULES.values()} <= {
        m.removeprefix("ctrain.cli.") for m in modules
    }
