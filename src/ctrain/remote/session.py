"""What ctrain does with a cluster over SSH: open the one master connection, check the
cluster's ctrain, send a submission, run the cluster's ctrain, fetch outputs. The commands come
from ``commands``; they run through util.proc, the one module that starts processes.

The cluster's own ctrain does the cluster's work (rendering with its settings and templates,
sbatch, squeue, scontrol, scancel), so what runs there is what runs for a user logged in.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from ctrain import __version__
from ctrain.errors import CtrainError, ExternalToolError
from ctrain.remote import commands
from ctrain.remote.registry import Remote
from ctrain.util import proc

SSH_LOST = 255  # ssh's exit code for its own failure (not the remote command's)
CONNECT_TIMEOUT = 600  # seconds for the login itself: a person may be typing a second factor
COMMAND_TIMEOUT = 120


class Link(NamedTuple):
    """A cluster and how to reach it: its master connection's directory and persistence."""

    remote: Remote
    control: str
    persist: str
    environ: Mapping[str, str]

    def ssh(self, line: str) -> list[str]:
        return commands.ssh_argv(self.remote, self.control, self.persist, line)


def connect(remote: Remote, environ: Mapping[str, str], persist: str) -> Link:
    """The link to ``remote``, its master connection opened if it is not up: the one login (and
    second factor) of a session. A failed login is one error line with the fix."""
    link = Link(remote, commands.control_dir(environ), persist, environ)
    os.makedirs(link.control, mode=0o700, exist_ok=True)
    os.chmod(link.control, 0o700)  # sockets are the user's login: nobody else's to use
    if proc.run(commands.check_argv(remote, link.control), environ).returncode == 0:
        return link
    done = proc.run(commands.master_argv(remote, link.control, persist), environ, CONNECT_TIMEOUT)
    if done.returncode != 0:
        raise ExternalToolError(*commands.ssh_failure(remote, done.stderr))
    return link


def close(remote: Remote, environ: Mapping[str, str]) -> bool:
    """End the master connection; False when none was open."""
    control = commands.control_dir(environ)
    return proc.run(commands.close_argv(remote, control), environ).returncode == 0


def _lost(link: Link, stderr: str) -> ExternalToolError:
    message, fix = commands.ssh_failure(link.remote, stderr)
    return ExternalToolError(f"the connection to {link.remote.name} failed: {message}", fix)


def check_ctrain(link: Link) -> str:
    """The cluster's ctrain version, refused when it is missing or older than this one."""
    remote = link.remote
    done = proc.run(link.ssh(commands.ctrain_line(remote, ["--version"])), link.environ)
    if done.returncode == SSH_LOST:
        raise _lost(link, done.stderr)
    install = f"install ctrain {__version__} there (pip install ctrain=={__version__})"
    where = f"or give its path: ctrain remote add {remote.name} {remote.host} --ctrain PATH"
    version = commands.remote_version(done.stdout) if done.returncode == 0 else None
    if version is None:
        raise ExternalToolError(
            f"no ctrain on {remote.name} ({remote.ctrain}: {proc.failure(done)})",
            f"{install}, {where}",
        )
    if commands.older(version, __version__):
        raise ExternalToolError(
            f"{remote.name} has ctrain {version}, older than this one's {__version__}",
            f"{install}, {where}",
        )
    return version


def run_ctrain(link: Link, args: Sequence[str], chdir: str = "") -> int:
    """The cluster's ctrain with ``args``, its output and errors shown as they come; its exit
    code. A connection lost on the way is an error that says how to carry on."""
    line = commands.ctrain_line(link.remote, args, chdir)
    code = proc.attached(link.ssh(line), link.environ)
    if code == SSH_LOST:
        again = " ".join(["ctrain", *args[:2], "--on", link.remote.name, *args[2:]])
        raise ExternalToolError(
            f"the connection to {link.remote.name} was lost during `ctrain {' '.join(args)}`",
            f"check the network, then run it again: {again}",
        )
    return code


def _checked_output(link: Link, line: str, what: str) -> str:
    """The stdout of ``line`` on the cluster. A failure is one line: the cluster's ctrain's own
    error (naming the cluster), or what failed and its last words."""
    done = proc.run(link.ssh(line), link.environ, COMMAND_TIMEOUT)
    if done.returncode == SSH_LOST:
        raise ExternalToolError(
            f"the connection to {link.remote.name} was lost during {what}",
            "check the network, then run the command again",
        )
    if done.returncode != 0:
        said = commands.ctrain_error(done.stderr)
        if said is not None:
            raise CtrainError(f"on {link.remote.name}: {said[0]}", said[1])
        raise ExternalToolError(
            f"{what} on {link.remote.name} failed: {proc.failure(done)}",
            f"run it there by hand: ssh {link.remote.host} {line}",
        )
    return done.stdout


class Submitted(NamedTuple):
    job_id: str
    directory: str  # on the cluster
    log: str  # on the cluster


def upload(link: Link, cwd: str, stamp: str, excludes: Sequence[str]) -> str:
    """Send ``cwd`` into a new submission directory; its path on the cluster."""
    directory = commands.submission_dir(link.remote, os.path.basename(cwd), stamp)
    _checked_output(link, commands.prepare_line(directory), "making the job's directory")
    argv = commands.upload_argv(link.remote, link.control, link.persist, directory, excludes)
    done = proc.run(argv, link.environ, timeout=None)
    if done.returncode != 0:
        raise ExternalToolError(
            f"sending {cwd} to {link.remote.name}:{directory} failed: {proc.failure(done)}",
            "free space on the cluster or exclude large files (--exclude), then submit again",
        )
    _checked_output(link, commands.seal_line(directory), "recording what was sent")
    return directory


def submit(link: Link, directory: str, job_args: Sequence[str]) -> Submitted:
    """``ctrain job submit`` on the cluster, in ``directory``; the job it made."""
    out = _checked_output(
        link, commands.ctrain_line(link.remote, ["job", "submit", *job_args], directory), "sbatch"
    )
    job_id = next((w for w in reversed(out.split()) if w.isdigit()), "")
    if not job_id:
        raise ExternalToolError(
            f"ctrain job submit on {link.remote.name} printed no job id ({proc.last_line(out)!r})",
            f"look in {directory} on {link.remote.name}",
        )
    record = job_record(link, job_id)
    return Submitted(job_id, directory, str(record.get("log", "")))


def job_record(link: Link, job_id: str) -> dict[str, object]:
    """What the cluster's ``ctrain job status --json JOBID`` says of one job."""
    line = commands.ctrain_line(link.remote, ["job", "status", "--json", job_id])
    out = _checked_output(link, line, f"ctrain job status {job_id}")
    rows = _json_rows(out)
    if rows is None:
        raise ExternalToolError(
            f"{link.remote.name}'s ctrain job status printed no JSON", "update ctrain there"
        )
    found = [row for row in rows if isinstance(row, dict) and str(row.get("job_id")) == job_id]
    return found[0] if found else {}


def _json_rows(out: str) -> list[object] | None:
    """The JSON list at the end of ``out`` (a login profile may have printed before it)."""
    lines = out.splitlines()
    for start, line in enumerate(lines):
        if line.strip() in ("[", "[]"):
            try:
                rows = json.loads("\n".join(lines[start:]))
            except ValueError:
                continue
            return rows if isinstance(rows, list) else None
    return None


def fetch(link: Link, source: str, paths: Sequence[str], destination: str) -> None:
    """Bring a job's outputs from its directory on the cluster into ``destination``."""
    shell = commands.rsync_shell(link.remote, link.control, link.persist)
    argv = commands.fetch_argv(source, paths, destination, shell, link.remote.host)
    if proc.attached(argv, link.environ) != 0:
        raise ExternalToolError(
            f"fetching {link.remote.name}:{source} into {destination} failed (see above; "
            "no file was left half-written)",
            "free space here, or fetch fewer paths, then fetch again",
        )


def fetch_here(source: str, paths: Sequence[str], destination: str) -> None:
    """The same as ``fetch`` on the cluster itself: from the job's directory to another."""
    if proc.attached(commands.fetch_argv(source, paths, destination, None)) != 0:
        raise ExternalToolError(
            f"copying {source} into {destination} failed (see above; no file was left "
            "half-written)",
            "free space there, or copy fewer paths, then fetch again",
        )
