"""``ctrain job render|submit MODE [options] -- CMD...``: job scripts from jobs/, checked;
``ctrain job status|logs|cancel JOBID``: the job after its id, on the login node."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ctrain.cli._options import DashDashCommand, setting_option, settings_from
from ctrain.names import JOB_MODES
from ctrain.settings_table import BY_NAME

if TYPE_CHECKING:
    from ctrain.slurm.request import JobRequest

Positive = click.IntRange(min=1)
TEMPLATES = "the template's"  # the default of an option the job template has its own value for


def request_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.argument("mode", type=click.Choice(JOB_MODES)),
        click.option("--nodes", type=Positive, help="Nodes. [template: 1, or 2 for multi-node]"),
        click.option(
            "--gpus-per-node", type=click.IntRange(min=0), help="GPUs per node; 0: CPU only."
        ),
        click.option(
            "--tasks-per-node",
            type=Positive,
            help="Ranks per node (multiworker, horovod-*); follows --gpus-per-node.",
        ),
        click.option("--cpus-per-task", type=Positive, help="CPU cores per task."),
        click.option("--mem", help="Memory per node, e.g. 64G."),
        click.option("--time", help="Time limit of each run: MINUTES, HH:MM:SS or D-HH:MM:SS."),
        click.option("--partition", help="Partition (queue)."),
        click.option("--account", help="Account (project) to charge."),
        click.option("--job-name", help="Job name (squeue, log file name)."),
        setting_option("image", help="Image for ctrain exec", shown_default=TEMPLATES),
        setting_option("runtime", help="Runtime in the job", shown_default=TEMPLATES),
        click.option(  # the job's request, written into its script: not the nv setting
            "--nv/--no-nv", default=None, help="Give the container the GPUs. [default: GPUs > 0]"
        ),
        click.option(
            "--signal-seconds",
            type=click.IntRange(min=1),
            help="Seconds before the time limit for the SIGUSR2 warning. [template: 300]",
        ),
        setting_option("check_network"),
        setting_option("profile"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _request(mode: str, **flags: Any) -> JobRequest:
    from ctrain.slurm.request import JobRequest

    command: tuple[str, ...] = click.get_current_context().meta["ctrain.command"]
    names = ("image", "runtime", "check_network", "profile")
    settings = settings_from({name: flags.pop(name) for name in names})
    given = {name: settings.sources[name] != "default" for name in names}
    return JobRequest(
        mode=mode,
        command=command,
        image=settings.image if given["image"] else None,
        runtime=settings.runtime if given["runtime"] else None,
        check_network=settings.check_network,
        profile=settings.profile,
        **flags,
    )


@click.group("job")
def job() -> None:
    """Render and submit sbatch job scripts (jobs/): every mode, requeued on the time limit;
    then follow the job: its state, its log, and cancel it."""


@job.command("render", cls=DashDashCommand)
@request_options
def render(mode: str, **flags: Any) -> None:
    """Print the job script for MODE running CMD: ctrain job render MODE [options] -- CMD..."""
    from ctrain.slurm import jobs

    click.echo(jobs.render(_request(mode, **flags)), nl=False)


@job.command("submit", cls=DashDashCommand)
@request_options
@click.option("--save", type=click.Path(dir_okay=False), help="Also keep the script here.")
@setting_option("remote")
@setting_option("sync_exclude")
def submit(
    mode: str,
    save: str | None,
    remote: str | None,
    sync_exclude: tuple[str, ...],
    **flags: Any,
) -> None:
    """Render the job script and submit it with sbatch; print the job id.

    With --on NAME: send this directory to the cluster NAME (only what changed; not .git/, what
    .gitignore names or --exclude), into a directory of this submission's own, and submit there
    with the cluster's ctrain, its settings and templates.
    """
    from ctrain.cli import _remote

    name = _remote.chosen(remote)
    if name:
        if save:
            from ctrain.errors import UsageError

            raise UsageError(
                "--save with --on: the script is rendered on the cluster",
                f"leave out --save: the cluster keeps it as {SAVED} in the job's directory",
            )
        _submit_on(name, mode, sync_exclude, flags)
        return
    import tempfile
    from pathlib import Path

    from ctrain.slurm import jobs, watch
    from ctrain.util import proc

    script = jobs.render(_request(mode, **flags))
    if save:
        Path(save).write_text(script, encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="ctrain-job-") as tmp:
        path = Path(tmp) / f"{mode}.sbatch"
        path.write_text(script, encoding="utf-8")
        os.chmod(path, 0o755)
        out = proc.check(jobs.sbatch_argv(path))
    job_id = jobs.job_id(out)
    click.echo(job_id)
    warning = watch.record(os.environ, job_id, mode, script, os.getcwd())
    if warning:
        click.echo(warning, err=True)


def _submit_on(name: str, mode: str, sync_exclude: tuple[str, ...], flags: dict[str, Any]) -> None:
    import secrets
    import time

    from ctrain.cli import _remote
    from ctrain.remote import session
    from ctrain.slurm import jobs

    jobs.render(_request(mode, **flags))  # checked here first: a bad request sends nothing
    excludes = settings_from({"sync_exclude": sync_exclude}).sync_exclude
    link = _remote.connect(name)
    stamp = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)
    directory = session.upload(link, os.getcwd(), stamp, excludes)
    args = [
        mode,
        *_options(flags),
        "--save",
        SAVED,
        "--",
        *click.get_current_context().meta["ctrain.command"],
    ]
    done = session.submit(link, directory, args)
    click.echo(done.job_id)
    click.echo(
        f"ctrain: job {done.job_id} on {name}: directory {directory}, log {done.log}", err=True
    )


SAVED = "ctrain-job.sbatch"  # the script, kept in a submission's directory on the cluster


def _options(flags: dict[str, Any]) -> list[str]:
    """The job options given, as the cluster's ``ctrain job submit`` takes them (a setting's
    option as its row spells it)."""
    words: list[str] = []
    for key, value in flags.items():
        row = BY_NAME.get(key)
        option = row.option if row else "--" + key.replace("_", "-")
        if value is None:
            continue
        if key == "nv":
            words.append("--nv" if value else "--no-nv")
        elif row is not None and row.is_flag:
            words.append(option)
        else:
            words += [option, str(value)]
    return words


@job.command("preflight")
@click.argument("exit_code", required=False, type=int)
def preflight(exit_code: int | None) -> None:
    """Check every node of this job and print what the job script does next.

    The job scripts run it before training and, with the step's EXIT_CODE, after a step that
    failed: it prints `go`, `requeue [NODES]` (the job requeued without NODES) or `end`, and
    its reasons on stderr, for the job's log. [env CTRAIN_PREFLIGHT, CTRAIN_PREFLIGHT_FREE,
    CTRAIN_FAULT_RETRIES]
    """
    from pathlib import Path

    from ctrain.slurm.preflight import job_verdict

    verdict, lines = job_verdict(os.environ, settings_from({}), Path.cwd(), exit_code)
    for line in lines:
        click.echo(line, err=True)
    click.echo(verdict.line())


# ---- after the job id: here, or on a cluster with --on -------------------------------------

STATUS_LAST = 20  # jobs of the ledger that `ctrain job status` shows


def _on(remote: str | None, args: list[str]) -> None:
    """With --on (or CTRAIN_REMOTE, or a config file's ``remote``): the command runs on that
    cluster instead, and this process exits with its exit code."""
    from ctrain.cli import _remote

    name = _remote.chosen(remote)
    if name:
        _remote.forward(name, args)


@job.command("status")
@click.argument("job_ids", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as a JSON list.")
@setting_option("remote")
def status(job_ids: tuple[str, ...], as_json: bool, remote: str | None) -> None:
    """Print the state, elapsed time, nodes, restarts, exit code and log of each JOBID (without
    one: the last 20 jobs `ctrain job submit` submitted), from Slurm's controller, else its
    accounting, else ctrain's ledger (state UNKNOWN)."""
    _on(remote, ["job", "status", *job_ids, *(["--json"] if as_json else [])])
    from ctrain.slurm import tracking, watch

    ledger = watch.ledger(os.environ)
    ids = tracking.checked_ids(job_ids) or list(ledger)[-STATUS_LAST:]
    states = watch.states(ids, ledger)
    click.echo((tracking.format_json if as_json else tracking.format_table)(states), nl=False)


def _write(chunk: bytes) -> None:
    click.echo(chunk, nl=False)  # echo flushes: the log arrives as written, over ssh too


def _say(line: str) -> None:
    click.echo(line, err=True)


@job.command("logs")
@click.argument("job_id")
@click.option(
    "-f", "--follow", is_flag=True, help="Print what the job appends until it ends (Ctrl-C stops)."
)
@setting_option("remote")
def logs(job_id: str, follow: bool, remote: str | None) -> None:
    """Print the log of JOBID (its stdout, from Slurm's controller, else ctrain's ledger); with
    --follow, also what is appended until the job ends, then its final state on stderr."""
    _on(remote, ["job", "logs", job_id, *(["--follow"] if follow else [])])
    from ctrain.errors import CtrainError, Interrupted
    from ctrain.slurm import tracking, watch

    ledger = watch.ledger(os.environ)
    (state,) = watch.states(tracking.checked_ids([job_id]), ledger)
    if not state.log:
        raise CtrainError(
            f"neither Slurm nor ctrain's ledger knows where job {job_id} writes its log",
            "look in the job's directory, or for its --output in the job script",
        )
    if not follow:
        if not os.path.exists(state.log):
            raise tracking.missing_log(state)
        watch.print_from(state.log, 0, _write)
        return
    try:
        _say(tracking.ended_line(watch.follow(state, ledger, _write, _say)))
    except KeyboardInterrupt as exc:
        raise Interrupted(
            f"stopped following job {job_id}'s log (SIGINT); the job keeps running",
            f"follow it again: ctrain job logs -f {job_id}; stop it: ctrain job cancel {job_id}",
        ) from exc


def _me() -> str:
    """This process's user name, as Slurm names a job's owner (the uid without a name)."""
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


@job.command("cancel")
@click.argument("job_ids", nargs=-1, required=True)
@setting_option("remote")
def cancel(job_ids: tuple[str, ...], remote: str | None) -> None:
    """Cancel each JOBID with scancel (the job script checkpoints and stops); a job of another
    user is refused, before any job is cancelled, and a job that has ended is said so."""
    _on(remote, ["job", "cancel", *job_ids])
    from ctrain.slurm import tracking, watch
    from ctrain.util import proc

    states = watch.states(tracking.checked_ids(job_ids), watch.ledger(os.environ))
    me = _me()
    cancelling = [tracking.cancel_action(state, me) for state in states]
    for state, cancels in zip(states, cancelling, strict=True):
        if cancels:
            proc.check(tracking.scancel_argv(state.job_id))
            click.echo(f"job {state.job_id} cancelled (it was {state.state})")
        else:
            click.echo(f"job {state.job_id} has already ended: {state.state}")


@job.command("fetch")
@click.argument("job_id")
@click.argument("paths", nargs=-1)
@click.option(
    "--to", "destination", type=click.Path(file_okay=False), default=".",
    help="Where the outputs go. [default: this directory]",
)  # fmt: skip
@setting_option("remote")
def fetch(job_id: str, paths: tuple[str, ...], destination: str, remote: str | None) -> None:
    """Copy what job JOBID wrote (or only PATHS, relative to its directory) here: only what
    changed, never a file that was sent with the job, each file whole or not at all.

    With --on NAME, from the cluster NAME over its one SSH connection; then
    `tensorboard --logdir` works here.
    """
    from ctrain.cli import _remote
    from ctrain.remote import session

    name = _remote.chosen(remote)
    if name:
        link = _remote.connect(name)
        source = str(session.job_record(link, job_id).get("workdir", ""))
        session.fetch(link, _job_dir(job_id, source), paths, destination)
        return
    from ctrain.slurm import tracking, watch

    (state,) = watch.states(tracking.checked_ids([job_id]), watch.ledger(os.environ))
    source = _job_dir(job_id, state.workdir)
    if os.path.realpath(source) == os.path.realpath(destination):
        click.echo(f"job {job_id}'s outputs are already here ({source})", err=True)
        return
    session.fetch_here(source, paths, destination)


def _job_dir(job_id: str, workdir: str) -> str:
    if not workdir:
        from ctrain.errors import CtrainError

        raise CtrainError(
            f"neither Slurm nor ctrain's ledger knows job {job_id}'s directory",
            "give its outputs' paths to rsync or scp yourself",
        )
    return workdir
