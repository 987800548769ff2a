"""The root command. It only adds the command groups, each imported when it is used, so
``ctrain --version`` and ``ctrain launch`` import nothing they do not need.

It is also the one place where a command fails: a CtrainError, a Click usage error, an
OSError or Ctrl-C becomes one ``ctrain: error: ... Fix: ...`` line on stderr and the exit
code ctrain.errors gives it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

import click

from ctrain import __version__
from ctrain.errors import CtrainError, FileAccessError, Interrupted, UsageError, exit_with

# command name -> "module:attribute" under ctrain.cli
COMMANDS = {
    "launch": "launch:launch",
    "exec": "containers:exec_",
    "run": "containers:run_",
    "shell": "containers:shell",
    "carried": "containers:carried",
    "pull": "images:pull",
    "push": "images:push",
    "resolve": "images:resolve",
    "build": "images:build",
    "overlay": "images:overlay",
    "cache": "images:cache",
    "job": "jobs:job",
    "remote": "remote:remote",
    "data": "data:data",
    "bench": "bench:bench",
    "examples": "examples:examples",
    "config": "config:config",
    "doctor": "doctor:doctor",
}


def command_path(args: Sequence[str]) -> str:
    """``ctrain`` and the commands ``args`` start with, as Click finds them (a usage error does
    not always say in which command it happened)."""
    names = ["ctrain"]
    command: click.Command = main
    for word in args:
        if not isinstance(command, click.Group):
            break
        subcommand = command.get_command(click.Context(command), word)
        if subcommand is None:
            break
        names.append(word)
        command = subcommand
    return " ".join(names)


def usage_error(exc: click.UsageError, args: Sequence[str]) -> UsageError:
    """Click's usage error as ours, naming the command whose --help shows the usage."""
    command = command_path(args)
    return UsageError(f"{command}: {exc.format_message()}", f"see `{command} --help`")


class CtrainGroup(click.Group):
    """Loads commands lazily; turns every way a command can fail into one line (exit_with)."""

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
        except KeyboardInterrupt as exc:  # before Click turns it into a blank line and "Aborted!"
            raise Interrupted.by_ctrl_c() from exc

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's main, with every failure as one line; ``--help`` and ``--version`` exit 0."""
        run = super().main
        if not standalone_mode:
            return run(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            result = run(args, prog_name, complete_var, standalone_mode=False, **extra)
        except CtrainError as exc:
            exit_with(exc)
        except click.UsageError as exc:
            exit_with(usage_error(exc, sys.argv[1:] if args is None else args))
        except click.exceptions.Abort:
            exit_with(Interrupted.by_ctrl_c())  # Ctrl-C while Click parses
        except OSError as exc:
            exit_with(FileAccessError.from_oserror(exc))
        sys.exit(result if isinstance(result, int) else 0)


@click.group("ctrain", cls=CtrainGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ctrain")
def main() -> None:
    """ctrain: TensorFlow + Horovod training in containers on Slurm clusters.

    Settings come from flags, then CTRAIN_* environment variables, then ./ctrain.toml, then
    $XDG_CONFIG_HOME/ctrain/config.toml, then defaults: `ctrain config show` prints them.
    """
