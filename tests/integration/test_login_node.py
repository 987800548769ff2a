"""The tests' login node (tests/support/login_node.py) with plain OpenSSH, as ``ctrain remote``
will use it: one code for many connections through a ControlMaster, rsync over that master, a
wrong code refused, ``ssh -O exit``; and ctrain runs there as the remote user."""

from __future__ import annotations

import secrets
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctrain
from tests.support.helpers import SYSTEM_PATH, need
from tests.support.login_node import LoginNode, login_node, missing

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 30
OATH_PROMPT = "One-time password (OATH) for `ctrain-test': "
PROMPTS_FOR_A_WRONG_CODE = 3  # ssh's NumberOfPasswordPrompts: it asks again after a refusal


@pytest.fixture(scope="module")
def node() -> LoginNode:
    reason = missing()
    need(reason is None, f"no login node: {reason}")
    return login_node()


@pytest.fixture
def control_dir() -> Iterator[Path]:
    """A directory for ControlPath sockets with a short path: a socket's path has at most 107
    bytes, and ssh adds a random suffix to %C's 40 while it makes one (tmp_path is too long)."""
    with tempfile.TemporaryDirectory(prefix="ctrain-cm-", dir="/tmp") as directory:
        yield Path(directory)


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env={"PATH": SYSTEM_PATH, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def ssh(node: LoginNode, *args: str) -> list[str]:
    return ["ssh", "-F", str(node.ssh_config), *args]


def ok(node: LoginNode, done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (
        f"{shlex.join(done.args)}: exit {done.returncode}\n{done.stderr}\nsshd's log:\n"
        + node.log_tail()
    )
    return done.stdout


def oath_prompts(node: LoginNode) -> list[str]:
    """The prompts answered, without ssh's ``(user@host) `` before PAM's text."""
    return [prompt.split(") ", 1)[-1] for prompt in node.prompts()]


def test_one_code_for_a_control_master_and_rsync_over_it(
    node: LoginNode, control_dir: Path, tmp_path: Path
) -> None:
    node.reset_prompts()
    path = f"ControlPath={control_dir}/%C"
    master = ["-o", "ControlMaster=auto", "-o", path, "-o", "ControlPersist=60"]
    remote = node.home / f"login-node-check-{secrets.token_hex(4)}"
    try:
        for _ in range(3):
            assert ok(node, run(ssh(node, *master, node.host, "id -un"), dict(node.env))) == (
                f"{node.user}\n"
            )
        source = tmp_path / "src"
        (source / "sub").mkdir(parents=True)
        (source / "a.txt").write_text("a\n")
        (source / "sub" / "b.txt").write_text("b\n")
        shell = shlex.join(ssh(node, "-o", path))
        ok(node, run(["rsync", "-a", "-e", shell, f"{source}/", f"{node.host}:{remote}/"], {}))
        assert (remote / "a.txt").read_text() == "a\n"
        assert (remote / "sub" / "b.txt").read_text() == "b\n"
        assert remote.stat().st_uid == (node.home.stat().st_uid)  # written as the remote user
        assert oath_prompts(node) == [OATH_PROMPT], "one code for the master, none after it"

        ok(node, run(ssh(node, "-o", path, "-O", "check", node.host), {}))
        ok(node, run(ssh(node, "-o", path, "-O", "exit", node.host), {}))
        after = run(ssh(node, "-o", path, "-O", "check", node.host), {})
        assert after.returncode == 255, after.stderr
        assert list(control_dir.iterdir()) == []
    finally:
        run(ssh(node, "-o", path, "-O", "exit", node.host), {})
        shutil.rmtree(remote, ignore_errors=True)


def test_a_wrong_code_is_refused(node: LoginNode) -> None:
    node.reset_prompts()
    done = run(ssh(node, node.host, "true"), dict(node.wrong_code_env))
    assert done.returncode == 255, done.stderr
    assert "Permission denied" in done.stderr
    assert oath_prompts(node) == [OATH_PROMPT] * PROMPTS_FOR_A_WRONG_CODE
    assert f"Failed keyboard-interactive/pam for {node.user}" in node.log_tail()


def test_ctrain_runs_on_the_login_node(node: LoginNode) -> None:
    env = dict(node.env)
    version = ok(node, run(ssh(node, node.host, f"{node.ctrain} --version"), env))
    assert version == f"ctrain, version {ctrain.__version__}\n"
    script = ok(node, run(ssh(node, node.host, f"{node.ctrain} job render single -- true"), env))
    assert script.startswith("#!/bin/bash\n")
