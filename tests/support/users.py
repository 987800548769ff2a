"""The one unprivileged user the tests run ctrain as: made once per run with every group and the
subordinate ids any test needs, and checked, never assumed (a user an earlier run or another
module made without a group gets it added).

What it needs and why:
- group ``docker``: ``ctrain exec --runtime docker`` as the user reaches the Docker socket;
- subordinate uids and gids: rootless podman (useradd grants them where /etc/subuid exists);
- a home directory it owns: ch-run, podman and apptainer keep state there;
- ctrain's source where it can read it (``user_source``): the checkout may lie where it cannot
  (under /root, mode 700).
"""

from __future__ import annotations

import atexit
import functools
import grp
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from tests.support import scratch

TEST_USER = "ctrain-test"
TEST_USER_GROUPS = ("docker",)
SUBID_FILES = (Path("/etc/subuid"), Path("/etc/subgid"))
TIMEOUT = 30
SRC = Path(__file__).resolve().parents[2] / "src"


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=TIMEOUT)


def _has_subids(user: str) -> bool:
    return all(
        any(line.split(":", 1)[0] == user for line in path.read_text().splitlines())
        for path in SUBID_FILES
        if path.exists()
    )


def problems(user: pwd.struct_passwd) -> list[str]:
    """What the test user lacks, as sentences; empty when it is ready."""
    name = user.pw_name
    found = [f"{name} is not in group {g}" for g in TEST_USER_GROUPS if g not in groups(user)]
    if not _has_subids(name):
        found.append(
            f"{name} has no subordinate uids or gids in {' and '.join(map(str, SUBID_FILES))}"
        )
    home = Path(user.pw_dir)
    if not home.is_dir() or home.stat().st_uid != user.pw_uid:
        found.append(f"{user.pw_name}'s home {home} is missing or not its own")
    return found


def groups(user: pwd.struct_passwd) -> set[str]:
    """The names of every group ``user`` is in (its primary group included)."""
    names = {g.gr_name for g in grp.getgrall() if user.pw_name in g.gr_mem}
    return names | {grp.getgrgid(user.pw_gid).gr_name}


def ensure_test_user() -> pwd.struct_passwd:
    """TEST_USER, made or completed (as root), then checked: an AssertionError names what is
    still missing."""
    missing_groups = [g for g in TEST_USER_GROUPS if not _group_exists(g)]
    assert not missing_groups, f"groups {missing_groups} do not exist (make system)"
    try:
        user = pwd.getpwnam(TEST_USER)
    except KeyError:
        assert os.geteuid() == 0, f"no user {TEST_USER}, and only root can make it"
        _run("useradd", "--create-home", "--groups", ",".join(TEST_USER_GROUPS), TEST_USER)
        user = pwd.getpwnam(TEST_USER)
    lacking = [g for g in TEST_USER_GROUPS if g not in groups(user)]
    if lacking and os.geteuid() == 0:
        _run("usermod", "--append", "--groups", ",".join(lacking), TEST_USER)
    found = problems(user)
    assert not found, "the test user is not ready: " + "; ".join(found)
    return user


def _group_exists(name: str) -> bool:
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


@functools.cache
def user_source() -> Path:
    """A directory to put first on the test user's PYTHONPATH: a copy of this checkout's ctrain
    under /var/tmp, readable by every user wherever the checkout lies, made once per run and
    removed when it ends."""
    directory = scratch.make("src")
    atexit.register(shutil.rmtree, directory, True)
    directory.chmod(0o755)
    shutil.copytree(
        SRC / "ctrain", directory / "ctrain", ignore=shutil.ignore_patterns("__pycache__")
    )
    for path in directory.rglob("*"):  # readable by all; what runs (container/bin/ctrain) runs
        mode = path.stat().st_mode
        path.chmod(0o755 if path.is_dir() or mode & 0o100 else 0o644)
    return directory
