"""ctrain exec/run/shell on real podman: binds, ownership, environment, exit codes, signals,
working directory, a 2-rank training under srun, and what `ctrain doctor` says of podman.

Rootful podman runs the CPU image (tests/support/images.ci_cpu_image(), pushed to the local
registry and pulled into podman's store by `ctrain pull --runtime podman` once per session,
removed at the session's end when the session put it there: tests/conftest.py). The ownership
and rootless-doctor tests run ctrain as a plain user on rootless podman with a busybox image."""

from __future__ import annotations

import json
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import passthrough
from tests.support.helpers import CTRAIN, run_ctrain
from tests.support.podman_cli import TIMEOUT, as_user, push_busybox
from tests.support.real_runs import TRAIN, clean_env, reports, run
from tests.support.users import TEST_USER

pytestmark = [
    pytest.mark.podman,
    pytest.mark.docker,
    pytest.mark.builds("cpu-image"),
    pytest.mark.timeout(TIMEOUT * 2),
]


@pytest.fixture(scope="module")
def image(podman_cpu_image: str) -> str:
    """The CPU image in podman's store, pulled from the local registry by ctrain (once per
    session: tests/conftest.py)."""
    return podman_cpu_image


def ctrain(
    action: str, *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    argv = [action, "--runtime", "podman", *args]
    return run_ctrain(*argv, env=env or clean_env(), cwd=cwd, timeout=TIMEOUT, stdin=stdin)


def sh(image: str, script: str, *options: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return ctrain("exec", "--no-launch", *options, image, "--", "sh", "-c", script, cwd=cwd)


def test_read_only_bind_is_read_only(image: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    done = sh(image, "touch /data/x", "-B", f"{data}:/data:ro", cwd=tmp_path)
    assert done.returncode != 0
    assert "Read-only file system" in done.stderr
    assert not (data / "x").exists()
    done = sh(image, "echo hi > /data/x", "-B", f"{data}:/data", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (data / "x").read_text() == "hi\n"


def test_environment_passthrough(image: str, tmp_path: Path) -> None:
    options, env = passthrough.case(tmp_path)
    done = ctrain(
        "exec",
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
    assert sh(image, "exit 7", cwd=tmp_path).returncode == 7


def test_working_directory(image: str, tmp_path: Path) -> None:
    here = tmp_path / 'a dir, with "quotes"'  # podman reads --mount as CSV, as docker does
    here.mkdir()
    done = sh(image, "pwd; ls", cwd=here)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(here)  # ctrain's own, bound at the same path
    (here / "seen").write_text("")
    assert sh(image, "ls", cwd=here).stdout.split() == ["seen"]
    done = sh(image, "pwd", "--cwd", "/usr/lib", cwd=here)
    assert done.stdout.strip() == "/usr/lib"


@pytest.mark.parametrize(
    ("sig", "script", "code", "said"),
    [
        (signal.SIGTERM, 'trap "echo got-term; exit 42" TERM;', 42, "got-term"),
        (signal.SIGINT, "", 128 + signal.SIGINT, ""),  # killed by it: 128+N
    ],
)
def test_signals_reach_the_container_process(
    image: str, tmp_path: Path, sig: signal.Signals, script: str, code: int, said: str
) -> None:
    body = f"{script} while :; do echo ready; sleep 0.2; done"
    proc = subprocess.Popen(
        [CTRAIN, "exec", "--runtime", "podman", "--no-launch", image, "--", "sh", "-c", body],
        env=clean_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    # podman passes signals on once it is attached, which can be after the container's first
    # line on a busy machine (a SIGTERM before then ends podman itself): the third line is
    # 0.4 s into the container's run.
    assert [proc.stdout.readline().strip() for _ in range(3)] == ["ready"] * 3
    proc.send_signal(sig)  # ctrain exec'd podman: same pid; podman passes it on
    out, _ = proc.communicate(timeout=60)
    assert said in out
    assert proc.returncode == code


def test_run_uses_the_image_entrypoint(image: str, tmp_path: Path) -> None:
    done = ctrain("run", image, "--", "sh", "-c", "echo $CTRAIN_LAUNCH_MODE", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "single"


def test_shell_reads_its_commands_from_stdin(image: str, tmp_path: Path) -> None:
    done = ctrain("shell", image, cwd=tmp_path, stdin='echo "in $PWD as $(id -u)"\nexit 3\n')
    assert done.stdout.strip() == f"in {tmp_path} as 0"
    assert done.returncode == 3


@pytest.mark.slurm
def test_two_ranks_train_under_srun(image: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copy(TRAIN, tmp_path / "train.py")  # the working directory is bound
    argv = [CTRAIN, "exec", "--runtime", "podman", image, "--", "python", "train.py", str(out), "2"]
    run(["srun", "-n", "2", "-t", "10", *argv], clean_env(), timeout=600, cwd=tmp_path)
    first, second = reports(out, 2)
    assert first["mode"] == second["mode"] == "multiworker"
    assert first["size"] == second["size"] == 2
    assert first["weights"] == second["weights"]
    assert first["data_sum"] != second["data_sum"]  # each rank trained on its own shard


def podman_check(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    return dict(checks["podman"])


def test_doctor_reports_rootful_podman(tmp_path: Path) -> None:
    # On Debian's own Python: no TensorFlow to probe, so the doctor is quick.
    done = as_user("root", "/root", tmp_path, "doctor", "--json")
    check = podman_check(done)
    assert check["status"] == "PASS", check
    assert re.match(r"podman \S+ rootful, cgroup manager ", check["detail"]), check


@pytest.fixture(scope="module")
def rootless_image(tmp_path_factory: pytest.TempPathFactory) -> str:
    ref, _ = push_busybox("podman-rootless", tmp_path_factory.mktemp("push"))
    return ref


@pytest.fixture
def user_dir(test_user: pwd.struct_passwd) -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix="ctrain-podman-"))
    try:
        work.chmod(0o755)
        shutil.chown(work, test_user.pw_uid, test_user.pw_gid)
        yield work
    finally:
        shutil.rmtree(work)


def test_files_written_to_a_bind_belong_to_the_caller(
    rootless_image: str,
    test_user: pwd.struct_passwd,
    user_dir: Path,
) -> None:
    done = as_user(
        TEST_USER,
        test_user.pw_dir,
        user_dir,
        "exec",
        "--runtime",
        "podman",
        "--no-launch",
        rootless_image,
        "--",
        "sh",
        "-c",
        "echo made > out; id -u",
    )
    try:
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(test_user.pw_uid)  # the caller's uid inside too
        made = (user_dir / "out").stat()
        assert (made.st_uid, made.st_gid) == (test_user.pw_uid, test_user.pw_gid)
        doctor = as_user(TEST_USER, test_user.pw_dir, user_dir, "doctor", "--json")
        check = podman_check(doctor)
        assert check["status"] == "PASS", check
        assert " rootless, " in check["detail"]
        assert check["detail"].endswith(f"{TEST_USER} has subordinate uids and gids")
    finally:
        subprocess.run(
            ["runuser", "-u", TEST_USER, "--", "podman", "rmi", "-f", rootless_image],
            cwd=user_dir,
            capture_output=True,
            timeout=TIMEOUT,
        )
