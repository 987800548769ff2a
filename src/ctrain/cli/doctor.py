"""``ctrain doctor``: what this machine offers for a training run."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from ctrain.cli._options import setting_option, settings_from

if TYPE_CHECKING:
    from ctrain.checkline import Check


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@setting_option("doctor_network")
def doctor(as_json: bool, doctor_network: str | None) -> None:
    """Check this machine: runtime, cache space, Slurm, GPUs, TensorFlow, Horovod.

    With --network: the interconnect instead, on each node of a job (srun ctrain exec IMAGE --
    ctrain doctor --network): RDMA devices, what the container sees of them, NCCL's transport.
    """
    from ctrain import doctor as checks

    settings = settings_from({"doctor_network": doctor_network})
    if settings.doctor_network:
        from ctrain.network.check import run_checks

        results: Sequence[Check] = run_checks(os.environ)
    else:
        results = checks.run_checks(os.environ, settings)
    click.echo(checks.render(results, as_json))
    if checks.failed(results):
        sys.exit(1)
