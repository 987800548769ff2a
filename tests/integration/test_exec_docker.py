"""ctrain exec/run on the real Docker engine: binds, ownership, environment, exit codes, signals,
and `ctrain launch` inside the container under srun."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support import passthrough
from tests.support.helpers import CTRAIN
from tests.support.images import ctrain_min_image
from tests.support.real_runs import clean_env, run
from tests.support.users import TEST_USER, user_source

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def image() -> str:
    return ctrain_min_image()


def ctrain_exec(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CTRAIN, "exec", "--runtime", "docker", *args],
        env=env or clean_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_read_only_bind_is_read_only(image: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    done = ctrain_exec(
        "--no-launch",
        "-B",
        f"{data}:/data:ro",
        image,
        "--",
        "sh",
        "-c",
        "touch /data/x",
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert "Read-only file system" in done.stderr
    assert not (data / "x").exists()
    done = ctrain_exec(
        "--no-launch",
        "-B",
        f"{data}:/data",
        image,
        "--",
        "sh",
        "-c",
        "echo hi > /data/x",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert (data / "x").read_text() == "hi\n"


def test_files_written_to_a_bind_belong_to_the_caller(
    image: str, test_user: pwd.struct_passwd
) -> None:
    # The test user runs ctrain from a copy of the source tree (user_source) on Debian's own
    # Python (the venv and the checkout may lie under /root, which other users cannot enter).
    work = Path(tempfile.mkdtemp(prefix="ctrain-owner-"))
    try:
        work.chmod(0o755)
        os.chown(work, test_user.pw_uid, test_user.pw_gid)
        env = clean_env(HOME=test_user.pw_dir, PYTHONPATH=str(user_source()))
        done = subprocess.run(
            [
                "runuser",
                "-u",
                TEST_USER,
                "--",
                "/usr/bin/python3",
                "-m",
                "ctrain",
                "exec",
                "--runtime",
                "docker",
                "--no-launch",
                image,
                "--",
                "sh",
                "-c",
                "echo made > out",
            ],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        made = (work / "out").stat()
        assert (made.st_uid, made.st_gid) == (test_user.pw_uid, test_user.pw_gid)
    finally:
        shutil.rmtree(work)


def test_environment_passthrough(image: str, tmp_path: Path) -> None:
    options, env = passthrough.case(tmp_path)
    done = ctrain_exec(
        *options,
        image,
        "--",
        "python3",
        "-c",
        passthrough.SCRIPT,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    passthrough.check(done.stdout)


def test_exit_code_is_the_commands(image: str, tmp_path: Path) -> None:
    done = ctrain_exec("--no-launch", image, "--", "sh", "-c", "exit 7", cwd=tmp_path)
    assert done.returncode == 7


def test_sigterm_reaches_the_container_process(image: str, tmp_path: Path) -> None:
    script = 'trap "echo got-term; exit 42" TERM; echo ready; while :; do sleep 0.2; done'
    proc = subprocess.Popen(
        [CTRAIN, "exec", "--runtime", "docker", "--no-launch", image, "--", "sh", "-c", script],
        env=clean_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)  # ctrain exec'd docker: same pid
    out, _ = proc.communicate(timeout=60)
    assert "got-term" in out
    assert proc.returncode == 42


def test_run_uses_the_image_entrypoint(image: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [CTRAIN, "run", "--runtime", "docker", image, "--", "sh", "-c", "echo $CTRAIN_LAUNCH_MODE"],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "single"


@pytest.mark.slurm
def test_launch_inside_the_container_under_srun(image: str, tmp_path: Path) -> None:
    run(
        [
            "srun",
            "-n",
            "2",
            "-t",
            "5",
            "--output",
            f"{tmp_path}/plan-%t.json",
            CTRAIN,
            "exec",
            "--runtime",
            "docker",
            "--no-launch",
            image,
            "--",
            "ctrain",
            "launch",
            "--explain",
            "--json",
        ],
        clean_env(),
        timeout=180,
        cwd=tmp_path,
    )
    plans = [json.loads((tmp_path / f"plan-{t}.json").read_text()) for t in (0, 1)]
    assert [p["rank"] for p in plans] == [0, 1]
    assert {p["mode"] for p in plans} == {"multiworker"}
    assert plans[0]["tf_config"]["cluster"] == plans[1]["tf_config"]["cluster"]
