"""`ctrain exec` through the Apptainer stand-in, which runs the command for real in the
environment Apptainer would build (values shell-evaluated unless --no-eval, flags newer than
the reported release refused, `docker-daemon://` refused for exec, an asked --cwd fatal when
it fails). It is not Apptainer: see tests/support/fake_apptainer.py for what it models.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import fake_apptainer
from tests.support.helpers import run_ctrain

AWKWARD = "$HOME `echo hi` \"quoted\" 'single' a,b spaces\nnewline and a trailing \\"
# The command: writes the variables named after the output file, one JSON object.
DUMP = "import json, os, sys; json.dump({k: os.environ.get(k) for k in sys.argv[2:]}, open(sys.argv[1], 'w'))"  # noqa: E501


@pytest.fixture
def box(tmp_path: Path) -> dict[str, str]:
    env = fake_apptainer.with_standin(tmp_path, "apptainer", "singularity", SLURM_JOB_ID="7")
    fake_apptainer.make_sif(tmp_path / "img.sif", fake_apptainer.ctrain_image_env())
    return {**env.env, "CTRAIN_CACHE_DIR": str(tmp_path / "cache"), "CTRAIN_MIN_FREE_GB": "1"}


def seen(
    box: dict[str, str], cwd: Path, flags: tuple[str, ...], *names: str, image: str = ""
) -> tuple[subprocess.CompletedProcess[str], dict[str, str | None]]:
    """Run DUMP through ctrain exec (and ctrain launch inside); what the command saw."""
    out = cwd / "seen.json"
    out.unlink(missing_ok=True)
    image = image or str(Path(box["HOME"]).parent / "img.sif")
    command = (sys.executable, "-c", DUMP, str(out), *names)
    done = run_ctrain("exec", *flags, image, "--", *command, env=box, cwd=cwd)
    return done, (json.loads(out.read_text()) if out.exists() else {})


def test_a_value_reaches_the_script_byte_for_byte_on_singularity(
    box: dict[str, str], tmp_path: Path
) -> None:
    """SingularityCE's name and prefix (Apptainer's own: test_apptainer_real.py)."""
    done, got = seen(box, tmp_path, ("--runtime", "singularity", "--env", f"V={AWKWARD}"), "V")
    assert done.returncode == 0, done.stderr
    assert got["V"] == AWKWARD


@pytest.mark.parametrize("value", ["$HOME", "`id`", "ends\\"])
def test_below_no_eval_such_values_are_refused_before_apptainer_starts(
    box: dict[str, str], tmp_path: Path, value: str
) -> None:
    old = {**box, "FAKE_APPTAINER_VERSION": "1.0.3"}
    done, _ = seen(old, tmp_path, ("--env", f"V={value}"), "V")
    assert done.returncode != 0 and done.stderr.count("\n") == 1, done.stderr
    assert "shell-evaluated by apptainer version 1.0.3" in done.stderr
    assert "Apptainer >= 1.1" in done.stderr
    assert [c["argv"] for c in fake_apptainer.calls(Path(box["FAKE_APPTAINER_LOG"]))] == [
        ["--version"]
    ]


def test_below_no_eval_plain_values_still_work(box: dict[str, str], tmp_path: Path) -> None:
    """A newline and double quotes survive Apptainer's double-quoting (only `"` is escaped)."""
    old = {**box, "FAKE_APPTAINER_VERSION": "1.0.3"}
    value = "two words, 'single' \"double\"\nsecond line"
    done, got = seen(old, tmp_path, ("--env", f"V={value}"), "V")
    assert done.returncode == 0, done.stderr  # the stand-in would refuse --no-eval on 1.0.3
    assert got["V"] == value


def test_apptainers_compat_singularity_gets_apptainerenv(
    box: dict[str, str], tmp_path: Path
) -> None:
    compat = {**box, "FAKE_APPTAINER_COMPAT": "1"}
    done, got = seen(compat, tmp_path, ("--runtime", "singularity"), "SLURM_JOB_ID")
    assert done.returncode == 0, done.stderr
    assert got["SLURM_JOB_ID"] == "7"
    assert "INFO" not in done.stderr  # one line per SINGULARITYENV_ variable per rank, else


def test_docker_daemon_references_reach_apptainer_in_its_form(
    box: dict[str, str], tmp_path: Path
) -> None:
    shown = run_ctrain(  # before the pull: the reference as apptainer pull takes it
        "exec", "--dry-run", "docker-daemon://ctrain:0.1.0", "--", "x", env=box, cwd=tmp_path
    )
    assert "  note image docker-daemon://ctrain:0.1.0 given as docker-daemon:ctrain:0.1.0" in (
        shown.stdout
    )
    log = Path(box["FAKE_APPTAINER_LOG"])
    for given in ("docker-daemon://ctrain:0.1.0", "docker-daemon:ctrain:0.1.0"):
        done = run_ctrain("exec", "--no-launch", given, "--", "true", env=box, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        calls = [c for c in fake_apptainer.calls(log) if "argv" in c]
        pulls = [c["argv"] for c in calls if c["argv"][0] == "pull"]  # type: ignore[index]
        assert pulls[-1][-1] == "docker-daemon:ctrain:0.1.0"  # type: ignore[index]
        image = calls[-1]["container"]["image"]  # type: ignore[index]
        assert Path(image).parent.name == "images"  # then the pulled file runs


def test_slurm_tmpdir_user_and_the_images_locale_inside(
    box: dict[str, str], tmp_path: Path
) -> None:
    job_tmp = tmp_path / "slurm-7"
    job_tmp.mkdir()
    host = {**box, "TMPDIR": str(job_tmp), "USER": "someone", "LOGNAME": "someone"}
    host["LANG"] = "de_DE.UTF-8"
    done, got = seen(host, tmp_path, (), "TMPDIR", "USER", "LOGNAME", "LANG")
    assert done.returncode == 0, done.stderr
    assert got == {"TMPDIR": str(job_tmp), "USER": "someone", "LOGNAME": "someone", "LANG": "C"}
    asked, got = seen(host, tmp_path, ("--env", "LANG=en_US.UTF-8"), "LANG")
    assert asked.returncode == 0, asked.stderr
    assert got["LANG"] == "en_US.UTF-8"


def test_a_host_cuda_home_is_not_the_scripts_xla_flags(box: dict[str, str], tmp_path: Path) -> None:
    host = {**box, "CUDA_HOME": "/opt/host-cuda", "CUDA_PATH": "/opt/host-cuda"}
    done, got = seen(host, tmp_path, (), "CUDA_HOME", "XLA_FLAGS")
    assert done.returncode == 0, done.stderr
    assert got == {"CUDA_HOME": None, "XLA_FLAGS": None}  # this image sets no CUDA_HOME


def test_dry_run_names_the_release_and_every_added_variable(
    box: dict[str, str], tmp_path: Path
) -> None:
    shown = run_ctrain(
        "exec", "--dry-run", "docker://example/img:1", "--", "x", env=box, cwd=tmp_path
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1] == (
        "  note apptainer version 1.4.5: container variables as APPTAINERENV_NAME, "
        "values verbatim (--no-eval)"
    )
    runtime_env = {
        shlex.split(line.removeprefix("  runtime env "))[0].split("=", 1)[0]
        for line in lines
        if line.startswith("  runtime env ")
    }
    assert runtime_env == set()  # the exec runs the pulled file: no Apptainer cache needed
    pulled = "  pulled first: ctrain pull docker://example/img:1, then "
    assert any(line.startswith(pulled) for line in lines)
    calls = fake_apptainer.calls(Path(box["FAKE_APPTAINER_LOG"]))
    assert [call["argv"] for call in calls] == [["--version"]]  # asked, nothing run
