"""``ctrain remote`` and ``ctrain job ... --on`` from a "laptop" (this machine as root, with its
own config directory and sockets) to the tests' login node (login_node.py: a real OpenSSH sshd
that asks for the key and then a time-based code through PAM), in front of the real Slurm, as
the unprivileged test user whose login PATH has ctrain (~/.local/bin, as `pip install --user`).

One whole session asks for the code exactly once: remote add, a two-rank multiworker training
submitted in a SIF, its log followed to the end, its status, its checkpoint and TensorBoard files
fetched byte for byte, a second job cancelled. Then each fault is one line with its fix, and
nothing local is overwritten.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN, ctrain_env, need, snapshot, wait_for
from tests.support.images import foreign
from tests.support.login_node import LoginNode, login_node, missing
from tests.support.real_runs import clean_env

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.apptainer,
    pytest.mark.tensorflow,
    pytest.mark.builds("foreign"),
    pytest.mark.timeout(600),
]

SCRIPT = Path(__file__).parents[1] / "scripts" / "train_outputs.py"
TIMEOUT = 120
LAYOUT = ["--nodes", "1", "--gpus-per-node", "0", "--cpus-per-task", "1", "--mem", "1G"]
LAYOUT += ["--time", "10"]


@dataclass(frozen=True)
class Laptop:
    env: dict[str, str]
    project: Path  # the user's code, where ctrain runs

    def ctrain(self, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [CTRAIN, *args],
            env=ctrain_env(self.env),
            cwd=self.project,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
        done = self.ctrain(*args, timeout=timeout)
        assert done.returncode == 0, f"ctrain {' '.join(args)}: {done.stdout}{done.stderr}"
        return done

    def refused(self, *args: str) -> str:
        """The one error line of a command that must fail."""
        done = self.ctrain(*args)
        assert done.returncode != 0, done.stdout
        errors = [line for line in done.stderr.splitlines() if line.startswith("ctrain: error:")]
        assert len(errors) == 1 and " Fix: " in errors[0], done.stderr
        return errors[0]


@pytest.fixture(scope="module")
def node() -> Iterator[LoginNode]:
    reason = missing()
    need(reason is None, f"no login node: {reason}")
    found = login_node()
    bin_dir = found.home / ".local" / "bin"  # Debian's ~/.profile puts it on PATH if it exists
    made = [d for d in (bin_dir.parent, bin_dir) if not d.exists()]
    bin_dir.mkdir(parents=True, exist_ok=True)
    for directory in made:
        shutil.chown(directory, found.user, found.user)
    (bin_dir / "ctrain").symlink_to(found.ctrain)
    yield found
    (bin_dir / "ctrain").unlink()
    for directory in reversed(made):
        shutil.rmtree(directory, ignore_errors=True)
    shutil.rmtree(found.home / "ctrain-jobs", ignore_errors=True)


def laptop_for(node: LoginNode, tmp_path: Path, runtime: str, **extra: str) -> Laptop:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(SCRIPT, project)
    (project / ".gitignore").write_text("secrets.txt\n")
    (project / "secrets.txt").write_text("stays on the laptop\n")
    env = clean_env(
        **{
            **node.env,
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_RUNTIME_DIR": runtime,  # short: a socket's path has at most 107 bytes
            **extra,
        }
    )
    return Laptop(env, project)


@pytest.fixture
def laptop(node: LoginNode, tmp_path: Path) -> Iterator[Laptop]:
    with tempfile.TemporaryDirectory(prefix="ctrain-cm-", dir="/tmp") as runtime:
        found = laptop_for(node, tmp_path, runtime)
        found.ok("remote", "add", "cluster", node.host, "--ssh-config", str(node.ssh_config))
        node.reset_prompts()
        yield found
        found.ctrain("remote", "close", "cluster")


def submitted(done: subprocess.CompletedProcess[str]) -> str:
    job = done.stdout.strip()
    assert job.isdigit(), done.stdout + done.stderr
    return job


def on_host(laptop: Laptop, *command: str) -> str:
    """A one-rank job of ``command`` on the cluster's host (no image), submitted from the
    laptop: its id."""
    argv = ["job", "submit", "--on", "cluster", "single", *LAYOUT, "--runtime", "host"]
    return submitted(laptop.ok(*argv, "--", *command))


def status(laptop: Laptop, job: str) -> dict[str, object]:
    rows = json.loads(laptop.ok("job", "status", "--on", "cluster", "--json", job).stdout)
    assert [row["job_id"] for row in rows] == [job]
    return dict(rows[0])


def test_a_whole_session_asks_for_the_code_once(
    node: LoginNode, laptop: Laptop, jobs_to_cancel: list[str]
) -> None:
    sif = str(foreign.foreign_sif())
    train = laptop.ok(
        "job", "submit", "--on", "cluster", "multiworker", *LAYOUT, "--tasks-per-node", "2",
        "--runtime", "apptainer", "--image", sif, "--job-name", "laptop",
        "--", "python", SCRIPT.name, "out", "2",
    )  # fmt: skip
    job = submitted(train)
    jobs_to_cancel.append(job)
    assert f"job {job} on cluster" in train.stderr, train.stderr
    with (laptop.project / SCRIPT.name).open("a") as script:  # edited while the job waits
        script.write("# edited on the laptop after the submission\n")
    mine = snapshot(laptop.project)

    logs = laptop.ok("job", "logs", "--on", "cluster", job, "-f", timeout=420)
    for rank in (0, 1):
        assert f"rank {rank} of 2 (multiworker): trained 2 epochs" in logs.stdout, logs.stdout
    assert status(laptop, job)["state"] == "COMPLETED"

    laptop.ok("job", "fetch", "--on", "cluster", job)
    remote_dir = node.home / str(status(laptop, job)["workdir"])
    fetched = snapshot(laptop.project)
    assert {k: v for k, v in fetched.items() if k in mine} == mine  # nothing of mine overwritten
    outputs = [k for k in fetched if k.startswith("out/") and fetched[k] is not None]
    assert any(k.startswith("out/ckpt/") for k in outputs), outputs
    assert any(k.startswith("out/tensorboard/") for k in outputs), outputs
    for name in outputs:
        assert fetched[name] == (remote_dir / name).read_bytes(), name
        assert (remote_dir / name).stat().st_uid == pwd.getpwnam(node.user).pw_uid, name
    assert f"laptop-{job}.out" in fetched
    assert "secrets.txt" not in snapshot(remote_dir)  # .gitignore'd: never sent

    sleeper = on_host(laptop, "sleep", "300")
    jobs_to_cancel.append(sleeper)
    laptop.ok("job", "cancel", "--on", "cluster", sleeper)
    wait_for(lambda: status(laptop, sleeper)["state"] == "CANCELLED", "the cancel", timeout=60)

    laptop.ok("remote", "close", "cluster")
    assert len(node.prompts()) == 1, node.prompts()


# ---- faults: each one line with its fix, nothing local overwritten ---------------------------


@pytest.fixture
def runtime() -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="ctrain-cm-", dir="/tmp") as directory:
        yield directory


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_host(node: LoginNode, tmp_path: Path, runtime: str) -> None:
    laptop = laptop_for(node, tmp_path, runtime)
    config = tmp_path / "closed.cfg"
    config.write_text(f"Host closed\n  HostName 127.0.0.1\n  Port {closed_port()}\n")
    laptop.ok("remote", "add", "closed", "closed", "--ssh-config", str(config))
    before = snapshot(laptop.project)
    line = laptop.refused("job", "submit", "--on", "closed", "single", *LAYOUT, "--", "true")
    assert "cannot reach closed" in line and "Connection refused" in line, line
    assert snapshot(laptop.project) == before


def test_a_wrong_second_factor(node: LoginNode, tmp_path: Path, runtime: str) -> None:
    laptop = laptop_for(node, tmp_path, runtime, **node.wrong_code_env)
    laptop.ok("remote", "add", "cluster", node.host, "--ssh-config", str(node.ssh_config))
    line = laptop.refused("job", "status", "--on", "cluster")
    assert "authentication to cluster failed" in line and "Permission denied" in line, line


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("", "no ctrain on cluster"),
        ('#!/bin/sh\necho "ctrain, version 0.0.1"\n', "cluster has ctrain 0.0.1, older than"),
    ],
    ids=["none", "older"],
)
def test_no_ctrain_or_an_older_one_on_the_cluster(
    node: LoginNode, tmp_path: Path, runtime: str, script: str, said: str
) -> None:
    program = node.ctrain.parent / f"ctrain-{'old' if script else 'none'}"
    if script:
        program.write_text(script)
        program.chmod(0o755)
    laptop = laptop_for(node, tmp_path, runtime)
    laptop.ok(
        "remote", "add", "cluster", node.host, "--ssh-config", str(node.ssh_config),
        "--ctrain", str(program),
    )  # fmt: skip
    before = snapshot(laptop.project)
    line = laptop.refused("job", "submit", "--on", "cluster", "single", *LAYOUT, "--", "true")
    assert said in line and "pip install ctrain==" in line, line
    assert snapshot(laptop.project) == before


def test_no_sbatch_on_the_cluster(node: LoginNode, tmp_path: Path, runtime: str) -> None:
    program = node.ctrain.parent / "ctrain-no-sbatch"
    program.write_text(f'#!/bin/sh\nPATH=/nowhere exec {node.ctrain} "$@"\n')
    program.chmod(0o755)
    laptop = laptop_for(node, tmp_path, runtime)
    laptop.ok(
        "remote", "add", "cluster", node.host, "--ssh-config", str(node.ssh_config),
        "--ctrain", str(program),
    )  # fmt: skip
    line = laptop.refused("job", "submit", "--on", "cluster", "single", *LAYOUT, "--", "true")
    assert line.startswith("ctrain: error: on cluster: sbatch not found"), line


def test_a_job_of_another_user_is_not_cancelled(
    node: LoginNode, laptop: Laptop, jobs_to_cancel: list[str]
) -> None:
    done = subprocess.run(
        ["sbatch", "--parsable", "-p", "debug", "-t", "5", "--output=/dev/null", "--wrap",
         "sleep 120"],
        capture_output=True, text=True, timeout=TIMEOUT, cwd="/tmp",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    theirs = done.stdout.strip().split(";")[0]
    jobs_to_cancel.append(theirs)
    line = laptop.refused("job", "cancel", "--on", "cluster", theirs)
    assert f"job {theirs} is root's, not yours ({node.user})" in line, line
    queued = subprocess.run(["squeue", "-h", "-j", theirs], capture_output=True, text=True)
    assert theirs in queued.stdout


def test_a_connection_lost_while_following_says_how_to_go_on(
    laptop: Laptop, jobs_to_cancel: list[str]
) -> None:
    job = on_host(laptop, "sleep", "300")
    jobs_to_cancel.append(job)
    follower = subprocess.Popen(
        [CTRAIN, "job", "logs", "--on", "cluster", job, "-f"],
        env=ctrain_env(laptop.env), cwd=laptop.project, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: status(laptop, job)["state"] == "RUNNING", "the job's start", timeout=60)
        time.sleep(2)  # the follower is reading the log by now
        laptop.ok("remote", "close", "cluster")  # the master goes, and every session with it
        _, stderr = follower.communicate(timeout=60)
    finally:
        follower.kill()
    errors = [line for line in stderr.splitlines() if line.startswith("ctrain: error:")]
    assert len(errors) == 1, stderr
    assert "the connection to cluster was lost" in errors[0], errors
    assert f"ctrain job logs --on cluster {job} --follow" in errors[0], errors
    assert follower.returncode != 0


def test_a_full_disk_during_a_fetch_keeps_the_good_file(
    laptop: Laptop, tmp_path: Path, jobs_to_cancel: list[str]
) -> None:
    job = on_host(laptop, "sh", "-c", "head -c 3000000 /dev/urandom > big.bin")
    jobs_to_cancel.append(job)
    wait_for(lambda: status(laptop, job)["state"] == "COMPLETED", "the job's end", timeout=120)
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True, timeout=30
    )
    try:
        (small / "big.bin").write_bytes(b"the good copy")
        line = laptop.refused("job", "fetch", "--on", "cluster", job, "big.bin", "--to", str(small))
        assert "fetching cluster:" in line and "no file was left half-written" in line, line
        assert snapshot(small) == {"big.bin": b"the good copy"}
    finally:
        subprocess.run(["umount", str(small)], check=True, timeout=30)


def test_a_full_disk_on_the_cluster_during_a_send(node: LoginNode, laptop: Laptop) -> None:
    small = node.home / "ctrain-small"
    small.mkdir()
    user = pwd.getpwnam(node.user)
    in_sshd = ["nsenter", f"--mount=/proc/{node.pid}/ns/mnt", "--"]  # where its sessions are
    size = f"size=256k,uid={user.pw_uid},gid={user.pw_gid},mode=755"
    subprocess.run([*in_sshd, "mount", "-t", "tmpfs", "-o", size, "tmpfs", str(small)],
                   check=True, timeout=30)  # fmt: skip
    try:
        laptop.ok("remote", "add", "small", node.host, "--ssh-config", str(node.ssh_config),
                  "--workdir", "ctrain-small")  # fmt: skip
        (laptop.project / "data.bin").write_bytes(os.urandom(1 << 20))
        before = snapshot(laptop.project)
        line = laptop.refused("job", "submit", "--on", "small", "single", *LAYOUT, "--", "true")
        assert "sending" in line and "free space on the cluster" in line, line
        assert snapshot(laptop.project) == before
    finally:
        subprocess.run([*in_sshd, "umount", str(small)], check=True, timeout=30)
        small.rmdir()
