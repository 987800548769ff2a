"""``ctrain bench``: the Click layer. The work is in ctrain.bench.core and ctrain.bench.run,
imported when the command runs (the CLI starts fast)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import click

from ctrain.cli._options import setting_option, settings_from
from ctrain.errors import ConfigError
from ctrain.names import BENCH_LAUNCHER_CHOICES, MODE_CHOICES

if TYPE_CHECKING:
    from pathlib import Path

    from ctrain.bench.core import BenchReport

FLAGS = {
    "bench_workers": "--workers",
    "bench_model": "--model",
    "bench_batch": "--batch",
    "bench_image_size": "--image-size",
    "bench_steps": "--steps",
    "bench_iters": "--iters",
    "bench_warmup": "--warmup",
    "bench_threads": "--threads",
    "bench_launcher": "--launcher",
    "bench_launcher_args": "--launcher-args",
    "bench_script": "--script",
    "bench_timeout": "--timeout",
    "bench_out": "--out",
    "bench_profile": "--profile",
}


def checked(flags: dict[str, str | None]) -> dict[str, str | None]:
    """Each given flag parsed by its setting now, so an error names the flag as typed."""
    from ctrain.settings import BY_NAME

    for name, text in flags.items():
        if text is not None and name in FLAGS:
            try:
                BY_NAME[name].parse(text)
            except ValueError as exc:
                raise ConfigError(f"{FLAGS[name]} {text!r}: {exc}", "correct the flag") from exc
    return flags


@click.command("bench")
@setting_option("mode", type=click.Choice(MODE_CHOICES))
@setting_option("bench_workers", flag=FLAGS["bench_workers"], metavar="N,N,...")
@setting_option("bench_model", flag=FLAGS["bench_model"], metavar="NAME")
@setting_option("bench_batch", flag=FLAGS["bench_batch"], metavar="N")
@setting_option("bench_image_size", flag=FLAGS["bench_image_size"], metavar="PX")
@setting_option("bench_steps", flag=FLAGS["bench_steps"], metavar="N")
@setting_option("bench_iters", flag=FLAGS["bench_iters"], metavar="N")
@setting_option("bench_warmup", flag=FLAGS["bench_warmup"], metavar="N")
@setting_option("bench_threads", flag=FLAGS["bench_threads"], metavar="N")
@setting_option(
    "bench_launcher",
    flag=FLAGS["bench_launcher"],
    type=click.Choice(BENCH_LAUNCHER_CHOICES),
)
@setting_option("bench_launcher_args", flag=FLAGS["bench_launcher_args"], metavar="'ARGS'")
@setting_option("bench_script", flag=FLAGS["bench_script"], metavar="PATH")
@setting_option("bench_timeout", flag=FLAGS["bench_timeout"], metavar="S")
@setting_option("bench_out", flag=FLAGS["bench_out"], metavar="DIR")
@setting_option("bench_profile", flag=FLAGS["bench_profile"], metavar="STEPS")
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

    s = settings_from(checked(flags))
    script = None if s.bench_script is None else Path(s.bench_script)
    if script is not None and not script.is_file():
        raise ConfigError(
            f"no benchmark script at {script}",
            "give --script an existing file, or leave it out to run ctrain's own benchmark",
        )
    options = benching.BenchOptions(
        workers=benching.parse_workers(s.bench_workers),
        mode=s.mode,
        model=s.bench_model,
        batch=s.bench_batch,
        image_size=s.bench_image_size,
        steps=s.bench_steps,
        iters=s.bench_iters,
        warmup=s.bench_warmup,
        threads=s.bench_threads or 0,  # unset: TensorFlow's own
        launcher=s.bench_launcher,
        launcher_args=tuple(shlex.split(s.bench_launcher_args or "")),
        timeout=float(s.bench_timeout),
        profile=s.bench_profile,
    )
    out = Path(s.bench_out)
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
    from ctrain.bench.core import markdown_table

    click.echo(markdown_table(report.rows()), nl=False)
    for kind, path in paths.items():
        click.echo(f"{kind}: {path}")
    if "plot" not in paths:
        click.echo("plot: not drawn, matplotlib is not installed here (pip install matplotlib)")
    if report.profile is not None:
        found = report.profile.breakdown or f"{report.profile.directory} (no breakdown.txt)"
        click.echo(f"profile of the {report.profile.workers}-worker run: {found}")


def _ctrain_beside(python: str) -> str:
    """The ctrain script beside the workers' interpreter, else whatever PATH finds."""
    from pathlib import Path

    beside = Path(python).parent / "ctrain"
    return str(beside) if beside.is_file() else "ctrain"
