"""The root command. It only adds the command groups, each imported when it is used, so
``ctrain --version`` and ``ctrain launch`` import nothing they do not need."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from ctrain import __version__
from ctrain.errors import CtrainError

# command name -> "module:attribute" under ctrain.cli
COMMANDS = {
    "launch": "launch:launch",
    "exec": "containers:exec_",
    "run": "containers:run_",
    "shell": "containers:shell",
    "pull": "images:pull",
    "build": "images:build",
    "overlay": "images:overlay",
    "cache": "images:cache",
    "job": "jobs:job",
    "data": "data:data",
    "bench": "bench:bench",
    "config": "config:config",
    "doctor": "doctor:doctor",
}


class CtrainGroup(click.Group):
    """Loads commands lazily; turns a CtrainError into one line on stderr and its exit code."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attribute = target.partition(":")
        command: click.Command = getattr(importlib.import_module(f"ctrain.cli.{module}"), attribute)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CtrainError as exc:
            click.echo(exc.line(), err=True)
            sys.exit(exc.exit_code)


@click.group(cls=CtrainGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ctrain")
def main() -> None:
    """ctrain: TensorFlow + Horovod training in containers on Slurm clusters.

    Settings come from flags, then CTRAIN_* environment variables, then ./ctrain.toml, then
    $XDG_CONFIG_HOME/ctrain/config.toml, then defaults: `ctrain config show` prints them.
    """
