"""``ctrain launch``: the image's entrypoint. Imports only the pure launch core, never
TensorFlow."""

from __future__ import annotations

import os

import click

from ctrain.cli._options import setting_option, settings_from


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@setting_option("mode")
@setting_option("collective")
@setting_option("collective_timeout")
@setting_option("port_base")
@setting_option("keep_proxies")
@setting_option("quiet")
@setting_option("keras")
@setting_option("tune")
@setting_option("skip_mpi_check")
@setting_option("profile")
@setting_option("profile_dir")
@setting_option("profile_ranks")
@click.option(
    "--explain",
    is_flag=True,
    help="Print the plan for this rank, the interpreter and what it holds; run nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="With --explain: print JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def launch(command: tuple[str, ...], explain: bool, as_json: bool, **flags: str | None) -> None:
    """Prepare this rank (mode, GPUs, ports, TF_CONFIG, proxies) and exec COMMAND.

    The image's entrypoint: `srun ctrain launch -- python train.py`.
    """
    from ctrain.launch import start

    start.run(settings_from(flags), command, os.environ, explain_only=explain, as_json=as_json)
