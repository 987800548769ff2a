"""ctrain exec through the real ch-run (Charliecloud 0.31), as the unprivileged user
``ctrain-test``: binds, the container's environment, exit codes, signals, the working
directory; the pull's reuse; and a 2-rank ``srun`` multiworker training through ch-run.

The image is the CI CPU image converted once per session (``charliecloud_image``,
tests/support/charliecloud_image.py)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.charliecloud_image import OUT_DIR, PULL_TIMEOUT, SCRIPT_DIR
from tests.support.helpers import CTRAIN, SYSTEM_PATH, wait_for
from tests.support.multinode import probe, reports, same_weights
from tests.support.real_runs import SCRIPTS, clean_env, run
from tests.support.users import TEST_USER, user_source

TIMEOUT = 120
USER_ENV = {"PATH": f"/usr/sbin:{SYSTEM_PATH}"}  # runuser is in /usr/sbin; nothing else
# The first test to ask for the session's image waits for its conversion.
pytestmark = [
    pytest.mark.charliecloud,
    pytest.mark.docker,
    pytest.mark.builds("cpu-image"),
    pytest.mark.timeout(PULL_TIMEOUT + 2 * TIMEOUT),
]


@pytest.fixture
def work(test_user: pwd.struct_passwd) -> Iterator[Path]:
    """A directory the test user owns."""
    path = Path(tempfile.mkdtemp(prefix="ctrain-ch-"))
    try:
        path.chmod(0o755)
        os.chown(path, test_user.pw_uid, test_user.pw_gid)
        yield path
    finally:
        shutil.rmtree(path)


def as_user(user: pwd.struct_passwd, *args: str, **env: str) -> list[str]:
    """ctrain exec --runtime charliecloud as the test user, from a copy of the source tree
    (``user_source``) on Debian's Python (the venv and the checkout may lie under /root);
    runuser sets USER, which ch-run needs."""
    return [
        "runuser",
        "-u",
        TEST_USER,
        "--",
        "env",
        *(f"{k}={v}" for k, v in env.items()),
        f"PYTHONPATH={user_source()}",
        "/usr/bin/python3",
        "-m",
        "ctrain",
        "exec",
        "--runtime",
        "charliecloud",
        *args,
    ]


def exec_as(
    user: pwd.struct_passwd, cwd: Path, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        as_user(user, *args, **env),
        env=USER_ENV,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_bind_workdir_and_ownership(
    charliecloud_image: Path, test_user: pwd.struct_passwd, work: Path
) -> None:
    (work / "sub").mkdir()
    os.chown(work / "sub", test_user.pw_uid, test_user.pw_gid)
    script = "pwd; id -u; echo made > out; cat /proc/self/uid_map"
    argv = ["--no-launch", "-B", f"{work}:{OUT_DIR}", str(charliecloud_image)]
    done = exec_as(test_user, work / "sub", *argv, "--", "sh", "-c", script)
    assert done.returncode == 0, done.stderr
    cwd, uid, *_ = done.stdout.split()
    assert cwd == f"{OUT_DIR}/sub"  # the host's working directory, where the bind shows it
    assert uid == str(test_user.pw_uid)  # unprivileged: the caller's own uid, in a user namespace
    made = (work / "sub" / "out").stat()
    assert (made.st_uid, made.st_gid) == (test_user.pw_uid, test_user.pw_gid)
    refused = exec_as(
        test_user, work, "-B", f"{work}:/nowhere", str(charliecloud_image), "--", "true"
    )
    assert refused.returncode != 0
    assert refused.stderr.startswith("ctrain: error: bind destination /nowhere"), refused.stderr
    assert f"-B {work}:/mnt" in refused.stderr and "Traceback" not in refused.stderr


def test_the_container_environment_is_exactly_the_images_and_the_chosen(
    charliecloud_image: Path, test_user: pwd.struct_passwd, work: Path
) -> None:
    env_file = work / "vars.env"
    env_file.write_text("FROM_FILE=two words\n")
    host = {
        "SLURM_JOB_ID": "123",
        "NCCL_DEBUG": "INFO",
        "CTRAIN_QUIET": "1",
        "PYTHONPATH_LEAK": "/leak",
        "LD_LIBRARY_PATH": "/leak",
        "SECRET": "no",
    }
    script = "import json, os; print(json.dumps(dict(os.environ)))"
    done = exec_as(
        test_user,
        work,
        "--no-launch",
        "--env",
        "ASKED='quoted' $HOME a:b",
        "--env-file",
        str(env_file),
        str(charliecloud_image),
        "--",
        "python3",
        "-c",
        script,
        **host,
    )
    assert done.returncode == 0, done.stderr
    inside = json.loads(done.stdout)
    image_path = "/opt/ctrain/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert inside.pop("CH_RUNNING") == "Weird Al Yankovic"  # ch-run's own, always set
    assert inside == {
        "SLURM_JOB_ID": "123",
        "NCCL_DEBUG": "INFO",
        "CTRAIN_QUIET": "1",
        "ASKED": "'quoted' $HOME a:b",  # verbatim: no quote stripping, no expansion
        "FROM_FILE": "two words",
        "PYTHONNOUSERSITE": "1",
        "USER": TEST_USER,
        "LOGNAME": TEST_USER,
        "PATH": image_path,  # the image's ch/environment
        "LANG": "C.UTF-8",
        "CTRAIN_VENV": "/opt/ctrain/venv",
        "PYTHONUNBUFFERED": "1",
    }


def test_exit_code_and_signal(
    charliecloud_image: Path, test_user: pwd.struct_passwd, work: Path
) -> None:
    done = exec_as(
        test_user, work, "--no-launch", str(charliecloud_image), "--", "sh", "-c", "exit 7"
    )
    assert done.returncode == 7, done.stderr
    pid_file = work / "pid"
    script = f"echo $$ > {OUT_DIR}/pid; exec sleep 600"
    argv = ["--no-launch", "-B", f"{work}:{OUT_DIR}", str(charliecloud_image), "--"]
    started = subprocess.Popen(
        as_user(test_user, *argv, "sh", "-c", script), env=USER_ENV, cwd=work, text=True
    )
    try:
        wait_for(
            lambda: pid_file.is_file() and pid_file.read_text().endswith("\n"),
            "the container's pid",
            timeout=TIMEOUT,
        )
        pid = int(pid_file.read_text())
        assert Path(f"/proc/{pid}/status").read_text().count(f"\t{test_user.pw_uid}\t") >= 1
        os.kill(pid, signal.SIGTERM)  # the command ctrain exec'd through ch-run: same pid
        assert started.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM
    finally:
        started.kill()


def test_a_second_pull_is_a_no_op(charliecloud_image: Path) -> None:
    cache = charliecloud_image.parent.parent
    env = clean_env(CTRAIN_CACHE_DIR=str(cache), CTRAIN_MIN_FREE_GB="1", USER="root")
    ref = json.loads(Path(f"{charliecloud_image}.json").read_text())["ref"]
    for verb in ("pull", "resolve"):
        done = run([CTRAIN, verb, "--runtime", "charliecloud", ref], env, timeout=TIMEOUT)
        assert str(charliecloud_image) in done.stdout
    assert done.stdout.strip() == str(charliecloud_image)  # resolve: what every rank runs
    # exec of the reference runs the recorded directory, converting nothing
    script = "import os; print(os.environ['CTRAIN_VENV'])"
    argv = [CTRAIN, "exec", "--runtime", "charliecloud", "--no-launch", ref, "--", "python"]
    done = run([*argv, "-c", script], env, timeout=TIMEOUT)
    assert done.stdout.strip() == "/opt/ctrain/venv" and "converting" not in done.stderr
    assert not [p for p in charliecloud_image.parent.iterdir() if p.name.startswith(".")]


@pytest.mark.slurm
@pytest.mark.tensorflow
def test_two_ranks_under_srun_train_identical_weights(
    charliecloud_image: Path, tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)
    env = clean_env(USER="root", CTRAIN_MODE="multiworker")
    argv = ["srun", "-n", "2", "-t", "5", "--kill-on-bad-exit=1", CTRAIN, "exec"]
    binds = ["-B", f"{SCRIPTS}:{SCRIPT_DIR}", "-B", f"{tmp_path}:{OUT_DIR}"]
    command = ["python", f"{SCRIPT_DIR}/{Path(probe(tmp_path)[1]).name}", OUT_DIR, "2"]
    run(
        [*argv, "--runtime", "charliecloud", *binds, str(charliecloud_image), "--", *command],
        env,
        timeout=240,
        cwd=tmp_path,
    )
    found = reports(tmp_path, 2)
    assert {r["said"]["size"] for r in found} == {2}
    assert same_weights(found)
