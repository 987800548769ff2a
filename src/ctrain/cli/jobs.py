"""``ctrain job render|submit MODE [options] -- CMD...``: job scripts from jobs/, checked."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ctrain.cli._options import DashDashCommand, setting_option, settings_from
from ctrain.names import JOB_MODES, RUNTIME_CHOICES

if TYPE_CHECKING:
    from ctrain.slurm.request import JobRequest

Positive = click.IntRange(min=1)


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
        click.option("--image", help="Image for ctrain exec. [env CTRAIN_IMAGE; setting image]"),
        click.option(
            "--runtime",
            type=click.Choice(RUNTIME_CHOICES),
            help="Runtime in the job. [env CTRAIN_RUNTIME; setting runtime]",
        ),
        click.option(
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
    """Render and submit sbatch job scripts (jobs/): every mode, requeued on the time limit."""


@job.command("render", cls=DashDashCommand)
@request_options
def render(mode: str, **flags: Any) -> None:
    """Print the job script for MODE running CMD: ctrain job render MODE [options] -- CMD..."""
    from ctrain.slurm import jobs

    click.echo(jobs.render(_request(mode, **flags)), nl=False)


@job.command("submit", cls=DashDashCommand)
@request_options
@click.option("--save", type=click.Path(dir_okay=False), help="Also keep the script here.")
def submit(mode: str, save: str | None, **flags: Any) -> None:
    """Render the job script and submit it with sbatch; print the job id."""
    import tempfile
    from pathlib import Path

    from ctrain.slurm import jobs
    from ctrain.util import proc

    script = jobs.render(_request(mode, **flags))
    if save:
        Path(save).write_text(script, encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="ctrain-job-") as tmp:
        path = Path(tmp) / f"{mode}.sbatch"
        path.write_text(script, encoding="utf-8")
        os.chmod(path, 0o755)
        out = proc.check(jobs.sbatch_argv(path))
    click.echo(jobs.job_id(out))


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
