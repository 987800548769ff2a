"""``ctrain doctor``: what this machine offers for a training run."""

from __future__ import annotations

import os
import sys

import click

from ctrain.cli._options import settings_from


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def doctor(as_json: bool) -> None:
    """Check this machine: runtime, cache space, Slurm, GPUs, TensorFlow, Horovod."""
    from ctrain import doctor as checks

    results = checks.run_checks(os.environ, settings_from({}))
    click.echo(checks.render(results, as_json))
    if checks.failed(results):
        sys.exit(1)
