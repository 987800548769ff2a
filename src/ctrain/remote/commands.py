"""Every command a session with a cluster runs, built here as argv lists (pure functions):
OpenSSH through one master connection per cluster, rsync over it, and the shell lines the
cluster's login shell runs. Nothing here starts a process (``session`` does, through
util.proc).

One connection, one authentication: every ssh and rsync names the same ``ControlPath`` in a
private directory of ctrain's, ``ControlMaster=auto`` and ``ControlPersist``, so a site with a
second factor asks once, when ``session.connect`` opens the master, and never again while it
persists.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence

from ctrain.remote.registry import Remote

SENT = ".ctrain-sent"  # in a submission's directory: the files sent, as rsync exclude rules
LATEST = "latest"  # beside the submissions of a project: the last one (rsync --link-dest)
ALWAYS_EXCLUDED = ("/.git/", f"/{SENT}")


def control_dir(environ: Mapping[str, str]) -> str:
    """Where the master connections' sockets are: $XDG_RUNTIME_DIR/ctrain-ssh (private and
    short), else ~/.ssh/ctrain. A socket's path must stay under about 100 bytes."""
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "ctrain-ssh")
    return os.path.join(environ.get("HOME", "~"), ".ssh", "ctrain")


def ssh_options(remote: Remote, control: str, persist: str) -> list[str]:
    """The options every ssh to ``remote`` shares (the user's own config applies under them)."""
    config = ["-F", remote.ssh_config] if remote.ssh_config else []
    return [
        *config,
        "-o", "ControlMaster=auto",
        "-o", f"ControlPath={control}/%C",
        "-o", f"ControlPersist={persist}",
        "-o", "ServerAliveInterval=15",
        "-o", "ServerAliveCountMax=4",
    ]  # fmt: skip


def master_argv(remote: Remote, control: str, persist: str) -> list[str]:
    """Open the master connection and return once it is authenticated (-f -N): the one time a
    second factor is asked for."""
    return ["ssh", *ssh_options(remote, control, persist), "-f", "-N", remote.host]


def check_argv(remote: Remote, control: str) -> list[str]:
    """Exit 0 when the master connection is up."""
    config = ["-F", remote.ssh_config] if remote.ssh_config else []
    return ["ssh", *config, "-o", f"ControlPath={control}/%C", "-O", "check", remote.host]


def close_argv(remote: Remote, control: str) -> list[str]:
    config = ["-F", remote.ssh_config] if remote.ssh_config else []
    return ["ssh", *config, "-o", f"ControlPath={control}/%C", "-O", "exit", remote.host]


def ssh_argv(remote: Remote, control: str, persist: str, line: str) -> list[str]:
    """Run the shell ``line`` on the cluster, through the master connection."""
    return ["ssh", *ssh_options(remote, control, persist), "-T", remote.host, "--", line]


def ctrain_line(remote: Remote, args: Sequence[str], chdir: str = "") -> str:
    """The cluster's ctrain with ``args``, in ``chdir`` if given, in a login shell (bash -l):
    the environment a user logged in has, modules and PATH from the profile included.
    CTRAIN_REMOTE is emptied so that a project's ctrain.toml naming a remote, sent along,
    cannot send the command on again."""
    command = f"env CTRAIN_REMOTE= {shlex.quote(remote.ctrain)} {shlex.join(args)}"
    inner = f"cd {shlex.quote(chdir)} && {command}" if chdir else command
    return f"exec bash -lc {shlex.quote(inner)}"


def submission_dir(remote: Remote, project: str, stamp: str) -> str:
    """A submission's own directory on the cluster: WORKDIR/PROJECT/STAMP (relative paths are
    under the login's home, where ssh starts)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", project).lstrip(".") or "project"
    return f"{remote.workdir.rstrip('/')}/{safe}/{stamp}"


def prepare_line(directory: str) -> str:
    """Make the submission's directory (and its parents)."""
    return f"mkdir -p -- {shlex.quote(directory)}"


def seal_line(directory: str) -> str:
    """After the upload: list what was sent (rules that ``fetch`` reads on the cluster's side,
    so it never brings back a file of the user's own), and point LATEST at this submission."""
    d = shlex.quote(directory)
    sent, ours = shlex.quote(SENT), shlex.quote(f"{SENT}*")
    return (
        f"cd {d} && find . ! -type d ! -name {ours} | sed 's|^\\./|- /|' > {sent}.partial "
        f'&& mv -f {sent}.partial {sent} && ln -sfn "$(basename "$PWD")" ../{LATEST}'
    )


def rsync_shell(remote: Remote, control: str, persist: str) -> str:
    """rsync's -e: ssh with the shared options, as one shell-quoted string."""
    return shlex.join(["ssh", *ssh_options(remote, control, persist)])


def upload_argv(
    remote: Remote, control: str, persist: str, directory: str, excludes: Sequence[str]
) -> list[str]:
    """Send the current directory to ``directory``: only what differs from the last
    submission travels (--link-dest: the rest is hard-linked there); .git/, what .gitignore
    files name and ``excludes`` stay behind."""
    return [
        "rsync", "--archive", "--compress", "--human-readable",
        "-e", rsync_shell(remote, control, persist),
        f"--link-dest=../{LATEST}/",
        "--filter=:- .gitignore",
        *(f"--exclude={pattern}" for pattern in (*ALWAYS_EXCLUDED, *excludes)),
        "./", f"{remote.host}:{directory}/",
    ]  # fmt: skip


def fetch_argv(
    source: str, paths: Sequence[str], destination: str, shell: str | None, host: str = ""
) -> list[str]:
    """Bring a job's outputs from ``source`` (on ``host`` through ``shell``, or here) into
    ``destination``: only what changed, never a file that was sent (the SENT rules), each file
    written beside its final name and renamed over it when complete."""
    where = f"{host}:" if host else ""
    sources = [f"{where}{source}/./{p}" for p in paths] or [f"{where}{source}/"]
    return [
        "rsync", "--archive", "--compress", "--human-readable",
        *(["--relative"] if paths else []),
        *(["-e", shell] if shell else []),
        f"--filter=: {SENT}",  # its lines are "- /PATH" rules
        f"--exclude=/{SENT}",
        *sources, f"{destination.rstrip('/')}/",
    ]  # fmt: skip


# ---- what ssh said ------------------------------------------------------------------------

_UNREACHABLE = (
    "could not resolve hostname",
    "connection refused",
    "connection timed out",
    "no route to host",
    "network is unreachable",
    "operation timed out",
    "connection closed by",
)


def ssh_failure(remote: Remote, stderr: str) -> tuple[str, str]:
    """What a failed ssh to ``remote`` means for the user: (message, fix), from its stderr."""
    last = ([line.strip() for line in stderr.splitlines() if line.strip()] or ["no message"])[-1]
    said = stderr.lower()
    by_hand = f"try `ssh {remote.host}` by hand"
    if "host key verification failed" in said:
        return (
            f"the host key of {remote.host} is unknown or has changed ({last})",
            f"check it with your site, then accept it once: `ssh {remote.host}` by hand",
        )
    if "permission denied" in said or "too many authentication failures" in said:
        return (
            f"authentication to {remote.host} failed ({last})",
            f"check your key, agent and second factor: {by_hand}",
        )
    if any(mark in said for mark in _UNREACHABLE):
        return (
            f"cannot reach {remote.host} ({last})",
            f"check the host name, your network or VPN and ~/.ssh/config; {by_hand}",
        )
    return f"ssh to {remote.host} failed ({last})", by_hand


def ctrain_error(stderr: str) -> tuple[str, str] | None:
    """The (message, fix) of the last ``ctrain: error: ... Fix: ...`` line in ``stderr``."""
    lines = [line for line in stderr.splitlines() if line.startswith("ctrain: error: ")]
    if not lines:
        return None
    message, _, fix = lines[-1].removeprefix("ctrain: error: ").partition(" Fix: ")
    return message, fix


def remote_version(output: str) -> str | None:
    """The version in ``ctrain --version`` output ("ctrain, version 0.1.0")."""
    found = re.search(r"version\s+(\S+)", output)
    return found.group(1) if found else None


def older(theirs: str, ours: str) -> bool:
    """True when version ``theirs`` is older than ``ours`` (numeric parts compared in order;
    a pre-release suffix counts as older than the release)."""

    def key(version: str) -> tuple[tuple[int, ...], int]:
        numbers = re.match(r"(\d+(?:\.\d+)*)(.*)", version)
        if numbers is None:
            return (), 0
        parts = tuple(int(p) for p in numbers.group(1).split("."))
        return parts + (0,) * (4 - len(parts)), 0 if numbers.group(2) else 1

    return key(theirs) < key(ours)
