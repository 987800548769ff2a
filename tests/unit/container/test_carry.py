"""The launcher carried into the container (container/carry.py, with its boot.sh and bin/ctrain):
which execs carry it and how, the boot script's choice of interpreter and its refusals (run here
by the system's /bin/sh, dash, as a container runs it with no bash)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import ctrain
from ctrain.cli import main
from ctrain.container import carry
from ctrain.container.runtimes import Request, plan_invocation
from ctrain.container.spec import Bind
from ctrain.errors import SpecError
from ctrain.releases import parse_version

BOOT = Path(carry.__file__).parent / "boot.sh"
CARRIED = carry.Carried("/host/site/ctrain", (("click", "/host/site/click"),))


def test_the_binds_and_the_command() -> None:
    assert carry.binds(CARRIED) == (
        Bind("/host/site/ctrain", "/opt/ctrain-carried/api/ctrain", "ro"),
        Bind("/host/site/click", "/opt/ctrain-carried/lib/click", "ro"),
    )
    assert carry.command(["python", "t.py"]) == (
        "/bin/sh",
        "/opt/ctrain-carried/api/ctrain/container/boot.sh",
        "--lib",
        "/opt/ctrain-carried/lib",
        "--",
        "python",
        "t.py",
    )
    named = carry.command(["python", "t.py"], "/ext3/env/bin/python", explain=True)
    assert named[2:9] == (
        "--lib", "/opt/ctrain-carried/lib", "--python", "/ext3/env/bin/python", "--explain", "--",
        "python",
    )  # fmt: skip
    assert carry.BOOT.relative_to(carry.API / "ctrain").as_posix() == "container/boot.sh"
    assert BOOT.is_file()
    made = carry.of_modules("/x/ctrain/__init__.py", [("click", "/y/click/__init__.py")])
    assert made == carry.Carried("/x/ctrain", (("click", "/y/click"),))


def test_carried_prints_the_pyxis_mounts_of_this_ctrain() -> None:
    """What a pyxis job script mounts: this ctrain's package and click's, read-only."""
    result = CliRunner().invoke(main, ["carried"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    here = Path(ctrain.__file__).parent
    click_dir = Path(click.__file__).parent
    assert result.output == (
        f"{here}:/opt/ctrain-carried/api/ctrain:ro,{click_dir}:/opt/ctrain-carried/lib/click:ro\n"
    )


# runtime, action, launch -> carried
CARRIES = [
    ("apptainer", "exec", True, True),
    ("singularity", "exec", True, True),
    ("docker", "exec", True, True),
    ("podman", "exec", True, True),
    ("apptainer", "exec", False, False),  # --no-launch: the command as given
    ("docker", "run", True, False),  # the image's runscript or entrypoint
    ("pyxis", "exec", True, True),  # --container-mounts SRC:DST:ro
    ("charliecloud", "exec", True, False),  # the image's own ctrain launch
    ("host", "exec", True, False),  # this interpreter's ctrain
]


@pytest.mark.parametrize(("runtime", "action", "launch", "carried"), CARRIES)
def test_which_execs_carry_the_launcher(
    runtime: str, action: str, launch: bool, carried: bool, tmp_path: Path
) -> None:
    image = tmp_path / ("img.sqsh" if runtime == "pyxis" else "img.sif")
    image.mkdir() if runtime == "charliecloud" else image.write_bytes(b"")
    for src in (CARRIED.package, *(d for _, d in CARRIED.deps)):
        (tmp_path / src.lstrip("/")).mkdir(parents=True)
    here = carry.Carried(
        str(tmp_path / "host/site/ctrain"), (("click", str(tmp_path / "host/site/click")),)
    )
    request = Request(
        runtime,
        action,  # type: ignore[arg-type]
        "" if runtime == "host" else str(image),
        ("python", "t.py"),
        launch=launch,
        carried=here,
    )
    got = plan_invocation(
        request,
        {"USER": "someone"},  # ch-run wants it
        lambda name: f"/usr/bin/{name}",
        None,
        version_of=lambda p: parse_version("apptainer version 1.4.5", p),
    )
    joined = " ".join(got.argv)
    assert ("/opt/ctrain-carried/api/ctrain" in joined) is carried, got.argv
    assert (str(carry.BOOT) in got.argv) is carried
    launcher = (
        f"launcher: ctrain from {here.package}, carried read-only to /opt/ctrain-carried/api/"
        "ctrain, run by the image's Python (--image-python); ctrain exec --explain shows which, "
        "and what it holds"
    )
    assert (launcher in got.notes) is carried
    if runtime == "apptainer":  # after the runtime's own notes
        assert list(got.notes) == [
            "apptainer version 1.4.5: container variables as APPTAINERENV_NAME, values verbatim "
            "(--no-eval)",
            *([launcher] if carried else []),
        ]
    if carried:
        # docker and podman: --entrypoint /bin/sh IMAGE BOOT ...
        assert got.argv[-6:] == [str(carry.BOOT), "--lib", str(carry.LIB), "--", "python", "t.py"]
        assert "/bin/sh" in got.argv


# ---- boot.sh ---------------------------------------------------------------------------------


def boot(
    tmp_path: Path, *command: str, python: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    base = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)}
    return subprocess.run(
        ["/bin/sh", str(BOOT), *carry.command(command, python)[2:]],
        env={**base, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def fake_python(tmp_path: Path, name: str, answer: str) -> Path:
    """A program that answers the version question with ``answer`` and says its name on stderr
    (the boot script hides the question's: what shows is its run as the launcher)."""
    (tmp_path / "bin").mkdir(exist_ok=True)
    path = tmp_path / "bin" / name
    path.write_text(f'#!/bin/sh\necho {answer}\necho "${{0##*/}}" >&2\n')
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("program", "chosen"),
    [
        ("python", "python"),
        ("python3", "python3"),
        ("python3.12", "python3.12"),
        ("python3.9", "python3.9"),
        ("python2", "python3"),  # not a Python 3: the first of python3, python on PATH
        ("python3-config", "python3"),
        ("ipython", "python3"),
        ("mypython", "python3"),
        ("bash", "python3"),
    ],
)
def test_the_commands_program_is_the_launchers_interpreter_when_it_is_a_python(
    tmp_path: Path, program: str, chosen: str
) -> None:
    fake_python(tmp_path, "python3", "3.11")
    fake_python(tmp_path, program, "3.11")
    done = boot(tmp_path, program, "train.py")
    assert done.returncode == 0 and done.stderr.split() == [chosen], done
    by_path = boot(tmp_path, str(tmp_path / "bin" / program), "train.py")
    assert by_path.stderr.split() == [chosen], by_path


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2 and done.stdout == "", done
    line = done.stderr.strip()
    assert "\n" not in line and line.startswith("ctrain: error: ") and " Fix: " in line, line
    return line


def test_no_python_on_the_path(tmp_path: Path) -> None:
    line = one_error(boot(tmp_path, "sh", "-c", "echo ran"))
    assert f"the image has no Python (no python3 or python on its PATH, {tmp_path}/bin)" in line
    assert "--image-python" in line


def test_the_commands_interpreter_missing(tmp_path: Path) -> None:
    line = one_error(boot(tmp_path, "python3.12", "t.py"))
    assert "python3.12 (the command's interpreter) is not in the image" in line


@pytest.mark.parametrize("version", ["3.8", "3.9", "2.7"])
def test_an_old_python_is_refused_by_name_and_version(tmp_path: Path, version: str) -> None:
    python = fake_python(tmp_path, "python3", version)
    line = one_error(boot(tmp_path, "sh", "-c", "echo ran"))
    assert (
        f"{python} (the first of python3, python on the image's PATH) is Python {version}" in line
    )
    assert "needs Python 3.10 or newer" in line


def test_a_named_interpreter_that_is_not_a_program(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("")
    line = one_error(boot(tmp_path, "sh", "-c", "true", python=str(tmp_path / "notes.txt")))
    assert "(--image-python) is not an executable file in the image" in line
    broken = fake_python(tmp_path, "python", "x; exit 1")
    line = one_error(boot(tmp_path, "sh", "-c", "true", python=str(broken)))
    assert "does not run as a Python in the image" in line


@pytest.mark.parametrize("version", ["3.10", "3.13", "3.21"])
def test_newer_pythons_pass_the_version_gate(tmp_path: Path, version: str) -> None:
    """Past the gate the boot script execs the launcher with it: the fake answers the version
    question, then fails the launch, which shows it was run."""
    python = fake_python(tmp_path, "python3", version)
    done = boot(tmp_path, "sh", "-c", "true")
    assert done.returncode == 0 and done.stdout == f"{version}\n", done  # the exec'd fake's echo
    assert done.stderr.split() == ["python3"]
    assert python.exists()


def test_the_launcher_runs_on_the_named_interpreter_and_the_command_sees_it_first(
    tmp_path: Path,
) -> None:
    """Here the 'image' is this machine: the launcher is this venv's ctrain (the carried
    directories are absent), exec'ing a shell that prints what it got. A command that runs
    `ctrain` itself (a job's `ctrain doctor --network`) finds the shim beside the boot script
    first on PATH, on the interpreter the launcher runs on."""
    show = (
        'echo "$PATH"; echo "$PYTHONPATH"; echo "$CTRAIN_CARRIED"; command -v ctrain; '
        'ctrain --version; echo "$CTRAIN_CARRIED_PYTHON"'
    )
    done = boot(
        tmp_path,
        "sh",
        "-c",
        show,
        python=sys.executable,
        CTRAIN_QUIET="1",
        PATH="/bin",
    )
    assert done.returncode == 0, done.stderr
    path, pythonpath, carried, *shim = done.stdout.splitlines()
    assert path.split(":")[:2] == [str(BOOT.parent / "bin"), os.path.dirname(sys.executable)]
    assert pythonpath.split(":")[0] == str(BOOT.parents[2])  # the package's, found from $0
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert carried == f"{sys.executable} (Python {version}, --image-python)"
    assert shim == [
        str(BOOT.parent / "bin" / "ctrain"),
        f"ctrain, version {ctrain.__version__}",
        sys.executable,
    ]


def test_the_commands_own_interpreter_runs_the_launcher(tmp_path: Path) -> None:
    show = "import os, sys; print(os.environ['CTRAIN_CARRIED']); print(sys.executable)"
    done = boot(tmp_path, sys.executable, "-c", show, CTRAIN_QUIET="1")
    assert done.returncode == 0, done.stderr
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert done.stdout.splitlines() == [
        f"{sys.executable} (Python {version}, the command's interpreter)",
        sys.executable,
    ]


def test_the_shim_alone_says_it_needs_the_boot_script() -> None:
    alone = subprocess.run(
        [str(BOOT.parent / "bin" / "ctrain"), "--version"], env={"PATH": "/bin"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "CTRAIN_CARRIED_PYTHON or CTRAIN_CARRIED_LIB is not set" in one_error(alone)


def test_boot_wants_its_double_dash_and_a_command(tmp_path: Path) -> None:
    bare = subprocess.run(
        ["/bin/sh", str(BOOT)], capture_output=True, text=True, timeout=60, env={"PATH": "/bin"}
    )
    assert "expected --lib DIR [--python PATH] [--explain] -- COMMAND" in one_error(bare)
    no_lib = subprocess.run(
        ["/bin/sh", str(BOOT), "--", "true"], capture_output=True, text=True, timeout=60,
        env={"PATH": "/bin"},
    )  # fmt: skip
    assert "expected --lib DIR" in one_error(no_lib)
    assert "no command given" in one_error(boot(tmp_path))


def test_explain_reaches_the_launcher_and_the_command_does_not_run(tmp_path: Path) -> None:
    """--explain goes to ctrain launch (here this venv's, on a named interpreter): it prints the
    plan and what the interpreter holds, and the command is not run."""
    done = subprocess.run(
        ["/bin/sh", str(BOOT), *carry.command(["sh", "-c", "echo ran"], sys.executable, True)[2:]],
        env={"PATH": "/bin", "HOME": str(tmp_path)},
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ctrain: mode=single ") and "ran" not in lines
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert lines[1] == f"  python {sys.executable} (Python {version}, --image-python)"
    assert lines[2].startswith("  ctrain ") and lines[2].endswith(" (carried from the host)")
    assert lines[3].startswith("  holds tensorflow ")


def test_explain_and_no_launch_exclude_each_other(tmp_path: Path) -> None:
    image = tmp_path / "img.sif"
    image.write_bytes(b"")
    request = Request(
        "apptainer", "exec", str(image), ("python", "t.py"), launch=False, explain=True
    )
    with pytest.raises(SpecError) as refused:
        plan_invocation(
            request,
            {},
            lambda name: f"/usr/bin/{name}",
            None,
            version_of=lambda p: parse_version("apptainer version 1.4.5", p),
        )
    assert (refused.value.message, refused.value.fix) == (
        "--explain asks ctrain launch for its plan, and --no-launch runs none",
        "drop one of them",
    )


def explained(tmp_path: Path, runtime: str, carried: carry.Carried | None) -> list[str]:
    image = tmp_path / "img.sif"
    image.write_bytes(b"")
    request = Request(
        runtime, "exec", "" if runtime == "host" else str(image), ("python", "t.py"),
        explain=True, carried=carried, python="/venv/bin/python",
    )  # fmt: skip
    got = plan_invocation(
        request,
        {},
        lambda name: f"/usr/bin/{name}",
        None,
        version_of=lambda p: parse_version("apptainer version 1.4.5", p),
    )
    return [arg.replace(str(tmp_path), "TMP") for arg in got.argv]


def test_explain_reaches_ctrain_launch_on_every_route(tmp_path: Path) -> None:
    """The host's interpreter, the image's own ctrain, or the carried boot script: each is
    asked for --explain."""
    for src in (CARRIED.package, *(d for _, d in CARRIED.deps)):
        (tmp_path / src.lstrip("/")).mkdir(parents=True)
    here = carry.Carried(
        str(tmp_path / "host/site/ctrain"), (("click", str(tmp_path / "host/site/click")),)
    )
    apptainer = ["/usr/bin/apptainer", "exec", "--cleanenv", "--no-eval"]
    assert explained(tmp_path, "host", here) == [
        "/venv/bin/python", "-m", "ctrain", "launch", "--explain", "--", "python", "t.py",
    ]  # fmt: skip
    assert explained(tmp_path, "apptainer", None) == [
        *apptainer, "TMP/img.sif", "ctrain", "launch", "--explain", "--", "python", "t.py",
    ]  # fmt: skip
    assert explained(tmp_path, "apptainer", here) == [
        *apptainer,
        "--bind", "TMP/host/site/ctrain:/opt/ctrain-carried/api/ctrain:ro",
        "--bind", "TMP/host/site/click:/opt/ctrain-carried/lib/click:ro",
        "TMP/img.sif", "/bin/sh", str(carry.BOOT), "--lib", str(carry.LIB), "--explain", "--",
        "python", "t.py",
    ]  # fmt: skip
