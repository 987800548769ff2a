"""`ctrain exec` through the Apptainer stand-in: what the container gets is what was asked.

The stand-in (tests/fake_apptainer.py) builds the container's environment the way Apptainer's
source does (values shell-evaluated unless --no-eval), refuses `docker-daemon://` for exec and
makes an asked --cwd that fails fatal; it is not Apptainer.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from tests import fake_apptainer
from tests.helpers import run_ctrain, sandbox

AWKWARD = "$HOME `echo hi` \"quoted\" 'single' a,b spaces\nnewline and a trailing \\"


@pytest.fixture
def box(tmp_path: Path) -> dict[str, str]:
    env = sandbox(tmp_path, FAKE_APPTAINER_LOG=str(tmp_path / "calls.jsonl"), SLURM_JOB_ID="7")
    for name in ("apptainer", "singularity"):
        fake_apptainer.install(env.bin, name)
    (tmp_path / "img.sif").write_bytes(b"")
    return {**env.env, "CTRAIN_CACHE_DIR": str(tmp_path / "cache"), "CTRAIN_MIN_FREE_GB": "1"}


def ctrain(box: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_ctrain(*args, env=box, cwd=cwd)


def container(box: dict[str, str]) -> dict[str, object]:
    last = fake_apptainer.calls(Path(box["FAKE_APPTAINER_LOG"]))[-1]
    got = last["container"]
    assert isinstance(got, dict)
    return got


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_a_value_arrives_byte_for_byte(box: dict[str, str], tmp_path: Path, runtime: str) -> None:
    image = str(tmp_path / "img.sif")
    args = ("exec", "--runtime", runtime, "--no-launch", "--env", f"V={AWKWARD}", image)
    done = ctrain(box, tmp_path, *args, "--", "true")
    assert done.returncode == 0, done.stderr
    env = container(box)["env"]
    assert isinstance(env, dict)
    assert env["V"] == AWKWARD


def test_docker_daemon_references_reach_apptainer_in_its_form(
    box: dict[str, str], tmp_path: Path
) -> None:
    for given in ("docker-daemon://ctrain:0.1.0", "docker-daemon:ctrain:0.1.0"):
        done = ctrain(box, tmp_path, "exec", "--no-launch", given, "--", "true")
        assert done.returncode == 0, done.stderr
        assert container(box)["image"] == "docker-daemon:ctrain:0.1.0"
    shown = ctrain(box, tmp_path, "exec", "--dry-run", "docker-daemon://ctrain:0.1.0", "--", "x")
    assert "  note image docker-daemon://ctrain:0.1.0 given as docker-daemon:ctrain:0.1.0" in (
        shown.stdout
    )


def test_the_container_starts_where_ctrain_runs_and_cwd_is_only_passed_when_asked(
    box: dict[str, str], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    image = str(tmp_path / "img.sif")
    done = ctrain(box, work, "exec", "--no-launch", image, "--", "true")
    assert done.returncode == 0, done.stderr
    assert container(box)["cwd"] == str(work)
    argv = fake_apptainer.calls(Path(box["FAKE_APPTAINER_LOG"]))[-1]["argv"]
    assert isinstance(argv, list) and "--pwd" not in argv and "--cwd" not in argv

    missing = str(tmp_path / "nowhere")
    asked = ctrain({**box, "CTRAIN_CWD": missing}, work, "exec", "--no-launch", image, "--", "x")
    assert asked.returncode == 255  # asked for, a failed chdir is Apptainer's fatal error
    assert missing in asked.stderr


def test_slurm_tmpdir_and_user_reach_the_container(box: dict[str, str], tmp_path: Path) -> None:
    job_tmp = tmp_path / "slurm-7"
    job_tmp.mkdir()
    host = {**box, "TMPDIR": str(job_tmp), "USER": "someone", "LANG": "de_DE.UTF-8"}
    done = ctrain(host, tmp_path, "exec", "--no-launch", str(tmp_path / "img.sif"), "--", "x")
    assert done.returncode == 0, done.stderr
    got = container(box)
    env = got["env"]
    assert isinstance(env, dict)
    assert env["TMPDIR"] == str(job_tmp) and env["USER"] == "someone"
    assert env["LANG"] == "C"  # Apptainer's own under --cleanenv; the image's %environment follows
    binds = got["binds"]
    assert isinstance(binds, list)
    assert any(b["src"] == b["dst"] == str(job_tmp) for b in binds)


def test_dry_run_names_the_release_and_every_added_variable(
    box: dict[str, str], tmp_path: Path
) -> None:
    shown = ctrain(box, tmp_path, "exec", "--dry-run", "docker://example/img:1", "--", "x")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1].startswith("  note apptainer version ")
    assert lines[1].endswith("values verbatim (--no-eval)")
    runtime_env = {
        key
        for line in lines
        if line.startswith("  runtime env ")
        for key in [shlex.split(line.removeprefix("  runtime env "))[0].split("=", 1)[0]]
    }
    assert runtime_env == {
        "APPTAINER_CACHEDIR",
        "APPTAINER_TMPDIR",
        "SINGULARITY_CACHEDIR",
        "SINGULARITY_TMPDIR",
    }
    calls = fake_apptainer.calls(Path(box["FAKE_APPTAINER_LOG"]))
    assert [call["argv"] for call in calls] == [["--version"]]  # asked, nothing run
