"""The ssh and rsync commands of a session: every one through the same master connection, the
cluster's ctrain never sent on again, only what changed sent, nothing the user sent fetched
back; what ssh's failures mean; which versions are older."""

from __future__ import annotations

import shlex

import pytest

from ctrain.remote import commands
from ctrain.remote.registry import Remote

HPC = Remote("hpc", "me@login", "ctrain-jobs", "/opt/ct/bin/ctrain", "/cfg")
CONTROL = "/run/user/1000/ctrain-ssh"
SHARED = [
    "-F", "/cfg",
    "-o", "ControlMaster=auto",
    "-o", "ControlPath=/run/user/1000/ctrain-ssh/%C",
    "-o", "ControlPersist=30m",
    "-o", "ServerAliveInterval=15",
    "-o", "ServerAliveCountMax=4",
]  # fmt: skip


def test_every_ssh_goes_through_the_one_master() -> None:
    assert commands.master_argv(HPC, CONTROL, "30m") == ["ssh", *SHARED, "-f", "-N", "me@login"]
    assert commands.ssh_argv(HPC, CONTROL, "30m", "true") == [
        "ssh", *SHARED, "-T", "me@login", "--", "true"
    ]  # fmt: skip
    assert shlex.split(commands.rsync_shell(HPC, CONTROL, "30m")) == ["ssh", *SHARED]
    path = ["-F", "/cfg", "-o", "ControlPath=/run/user/1000/ctrain-ssh/%C"]
    assert commands.check_argv(HPC, CONTROL) == ["ssh", *path, "-O", "check", "me@login"]
    assert commands.close_argv(HPC, CONTROL) == ["ssh", *path, "-O", "exit", "me@login"]


def test_without_a_config_file_ssh_reads_its_own() -> None:
    argv = commands.master_argv(HPC._replace(ssh_config=""), CONTROL, "5m")
    assert "-F" not in argv and "ControlPersist=5m" in argv


def test_the_sockets_are_in_a_private_short_directory() -> None:
    assert commands.control_dir({"XDG_RUNTIME_DIR": "/run/user/7", "HOME": "/h"}) == (
        "/run/user/7/ctrain-ssh"
    )
    assert commands.control_dir({"HOME": "/home/me"}) == "/home/me/.ssh/ctrain"


def test_the_clusters_ctrain_runs_quoted_in_a_login_shell_and_never_forwards_again() -> None:
    line = commands.ctrain_line(HPC, ["job", "submit", "single", "--", "python", "a b.py"], "d 1")
    assert line.startswith("exec bash -lc ")
    assert shlex.split(line)[3] == (
        "cd 'd 1' && env CTRAIN_REMOTE= /opt/ct/bin/ctrain job submit single -- python 'a b.py'"
    )
    assert shlex.split(commands.ctrain_line(HPC, ["--version"]))[3] == (
        "env CTRAIN_REMOTE= /opt/ct/bin/ctrain --version"
    )


@pytest.mark.parametrize(
    ("project", "expected"),
    [
        ("mnist", "ctrain-jobs/mnist/s1"),
        ("my code!", "ctrain-jobs/my_code_/s1"),
        (".x", "ctrain-jobs/x/s1"),
        ("..", "ctrain-jobs/project/s1"),
    ],
)
def test_each_submission_has_its_own_directory(project: str, expected: str) -> None:
    assert commands.submission_dir(HPC, project, "s1") == expected


def test_the_upload_sends_what_changed_and_leaves_git_ignored_and_excluded_files() -> None:
    argv = commands.upload_argv(HPC, CONTROL, "30m", "ctrain-jobs/p/s1", ["runs/", "*.out"])
    assert argv[0] == "rsync" and argv[-2:] == ["./", "me@login:ctrain-jobs/p/s1/"]
    assert "--link-dest=../latest/" in argv
    assert "--filter=:- .gitignore" in argv
    assert [a for a in argv if a.startswith("--exclude=")] == [
        "--exclude=/.git/", "--exclude=/.ctrain-sent", "--exclude=runs/", "--exclude=*.out"
    ]  # fmt: skip
    assert "--inplace" not in argv and "--partial" not in argv  # a file lands whole or not at all


def test_a_fetch_never_brings_back_what_was_sent() -> None:
    argv = commands.fetch_argv("ctrain-jobs/p/s1", [], "/home/me/p", "ssh -o X", "me@login")
    assert argv[-2:] == ["me@login:ctrain-jobs/p/s1/", "/home/me/p/"]
    assert "--filter=: .ctrain-sent" in argv and "--exclude=/.ctrain-sent" in argv
    assert argv[argv.index("-e") + 1] == "ssh -o X"
    assert "--inplace" not in argv and "--partial" not in argv


def test_a_fetch_of_paths_keeps_them_relative_to_the_job() -> None:
    argv = commands.fetch_argv("/d/s1", ["runs/tb", "model.keras"], "out", None)
    assert "--relative" in argv and "-e" not in argv
    assert argv[-3:] == ["/d/s1/./runs/tb", "/d/s1/./model.keras", "out/"]


def test_the_seal_lists_what_was_sent_as_exclude_rules() -> None:
    line = commands.seal_line("ctrain-jobs/p/s1")
    assert line.startswith("cd ctrain-jobs/p/s1 && find . ! -type d ! -name '.ctrain-sent*'")
    assert "sed 's|^\\./|- /|'" in line and "ln -sfn" in line and "../latest" in line


@pytest.mark.parametrize(
    ("stderr", "start"),
    [
        ("ssh: Could not resolve hostname nope: Name or service not known", "cannot reach"),
        ("ssh: connect to host 127.0.0.1 port 9: Connection refused", "cannot reach"),
        ("me@login: Permission denied (keyboard-interactive).", "authentication to"),
        ("Received disconnect: Too many authentication failures", "authentication to"),
        ("Host key verification failed.", "the host key of"),
        ("kex_exchange_identification: read: Connection reset by peer", "ssh to"),
    ],
)
def test_what_ssh_said_becomes_one_line_with_a_fix(stderr: str, start: str) -> None:
    message, fix = commands.ssh_failure(HPC, "debug noise\n" + stderr + "\n")
    assert message.startswith(start) and stderr.strip() in message
    assert "ssh me@login" in fix


@pytest.mark.parametrize(
    ("theirs", "ours", "is_older"),
    [
        ("0.1.0", "0.1.0", False),
        ("0.0.9", "0.1.0", True),
        ("0.1", "0.1.0", False),
        ("0.10.0", "0.9.0", False),
        ("0.1.0.dev3", "0.1.0", True),
        ("1.0.0", "0.1.0.dev3", False),
        ("garbage", "0.1.0", True),
    ],
)
def test_older_compares_the_numbers(theirs: str, ours: str, is_older: bool) -> None:
    assert commands.older(theirs, ours) is is_older


def test_the_version_is_read_from_ctrain_version() -> None:
    assert commands.remote_version("ctrain, version 0.1.0\n") == "0.1.0"
    assert commands.remote_version("bash: ctrain: command not found") is None


def test_the_clusters_error_line_is_read_back() -> None:
    stderr = "noise\nctrain: error: sbatch not found Fix: install it or put it on PATH\n"
    assert commands.ctrain_error(stderr) == ("sbatch not found", "install it or put it on PATH")
    assert commands.ctrain_error("ctrain: error: no fix here\n") == ("no fix here", "")
    assert commands.ctrain_error("bash: ctrain: command not found\n") is None
