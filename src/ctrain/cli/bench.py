"""``ctrain bench``: the Click layer. The work is in ctrain.bench.core and ctrain.bench.run,
imported when the command runs (the CLI starts fast)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from ctrain.cli._options import setting_option, settings_from
from ctrain.errors import ConfigError

if TYPE_CHECKING:
    from pathlib import Path

    from ctrain.bench.report import BenchReport


@click.command("bench")
@setting_option("mode")
@setting_option("bench_workers")
@setting_option("bench_model")
@setting_option("bench_batch")
@setting_option("bench_image_size")
@setting_option("bench_steps")
@setting_option("bench_iters")
@setting_option("bench_warmup")
@setting_option("bench_threads")
@setting_option("bench_launcher")
@setting_option("bench_launcher_args")
@setting_option("bench_script")
@setting_option("bench_timeout")
@setting_option("bench_out")
@setting_option("bench_profile")
def bench(**flags: str | None) -> None:
    """Measure images/second and scaling efficiency with the synthetic benchmark.

    Runs ctrain's synthetic benchmark (python -m ctrain.bench.synthetic; --script PATH runs
    your own with the same options) at each worker count through the launch path users use
    (srun -n N ctrain launch -- python -m ctrain.bench.synthetic ...; mpirun -np N for horovod
    without Slurm), shows progress on stderr, and writes OUT/bench.json, OUT/bench.md (workers,
    images/s, speed-up, scaling efficiency) and OUT/speedup.png (speed-up against workers, with
    the ideal line; where matplotlib is installed). Speed-up is against the smallest worker
    count given. --profile STEPS traces those steps of the largest worker count's run only
    (ctrain launch --profile) into OUT/profile; bench.md names the trace and its table of
    where the time went.
    """
    import shlex
    from pathlib import Path

    from ctrain.bench import core as benching
    from ctrain.bench import run

    settings = settings_from(flags)
    script = None if settings.bench_script is None else Path(settings.bench_script)
    if script is not None and not script.is_file():
        raise ConfigError(
            f"no benchmark script at {script}",
            "give --script an existing file, or leave it out to run ctrain's own benchmark",
        )
    options = benching.BenchOptions.from_settings(settings)
    out = Path(settings.bench_out)
    command = shlex.join(["ctrain", *sys.argv[1:]]) if sys.argv[1:2] == ["bench"] else ""
    report = run.run(
        options,
        out,
        os.environ,
        None if script is None else script.resolve(),
        sys.executable,
        _ctrain_beside(sys.executable),
        progress_out=sys.stderr,
        command=command,
        on_result=lambda partial: run.write_outputs(partial, out),
    )
    _show(report, run.write_outputs(report, out))


def _show(report: BenchReport, paths: dict[str, Path]) -> None:
    """The table on stdout, then where each output went."""
    from ctrain.bench.report import markdown_table

    click.echo(markdown_table(report.rows()), nl=False)
    for kind, path in paths.items():
        click.echo(f"{kind}: {path}")
    if "plot" not in paths:
        click.echo("plot: not drawn, matplotlib is not installed here (pip install matplotlib)")
    if report.profile is not None:
        breakdown = report.profile.breakdown or f"{report.profile.directory} (no breakdown.txt)"
        click.echo(f"profile of the {report.profile.workers}-worker run: {breakdown}")


def _ctrain_beside(python: str) -> str:
    """The ctrain script beside the workers' interpreter, else whatever PATH finds."""
    from pathlib import Path

    beside = Path(python).parent / "ctrain"
    return str(beside) if beside.is_file() else "ctrain"
