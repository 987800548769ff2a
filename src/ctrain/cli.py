"""The thin Click layer: options -> settings -> pure builders -> runner."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ctrain import __version__
from ctrain.errors import CtrainError
from ctrain.settings import BY_NAME, Resolved, Value, parse_flag, resolve

F = TypeVar("F", bound=Callable[..., Any])


def setting_option(name: str, *decls: str, **kwargs: Any) -> Callable[[F], F]:
    """A Click option for a setting; its help names the CTRAIN_* variable and the default."""
    setting = BY_NAME[name]
    flag = "--" + name.replace("_", "-")
    shown = setting.default if setting.default not in (None, ()) else "none"
    kwargs.setdefault("default", None)
    kwargs["help"] = (
        f"{setting.help[:1].upper()}{setting.help[1:]}. [env {setting.env}; default {shown}]"
    )
    return click.option(flag, *decls, name, **kwargs)


def settings_from(flags: dict[str, str | None]) -> dict[str, Resolved]:
    parsed: dict[str, Value] = {name: parse_flag(name, text) for name, text in flags.items()}
    return resolve(parsed, os.environ, Path.cwd())


class CtrainGroup(click.Group):
    """Turns a CtrainError into one line on stderr and its exit code; never a traceback."""

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


@main.group()
def config() -> None:
    """Show the effective settings."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def config_show(as_json: bool) -> None:
    """Every effective setting and where it came from."""
    resolved = settings_from({})
    if as_json:
        rows = {
            name: {
                "value": list(r.value) if isinstance(r.value, tuple) else r.value,
                "source": r.source,
                "env": BY_NAME[name].env,
            }
            for name, r in resolved.items()
        }
        click.echo(json.dumps(rows, indent=2))
        return
    for name, r in resolved.items():
        value = ",".join(r.value) if isinstance(r.value, tuple) else r.value
        click.echo(f"{name:<20} {value!s:<42} {r.source}")


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@setting_option("mode", type=click.Choice(["auto", "single", "mirrored", "multiworker", "horovod"]))
@setting_option("collective", type=click.Choice(["auto", "nccl", "ring"]))
@setting_option("collective_timeout")
@setting_option("port_base")
@setting_option("keep_proxies", is_flag=True, flag_value="true")
@setting_option("quiet", is_flag=True, flag_value="true")
@click.option("--explain", is_flag=True, help="Print the plan for this rank and run nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --explain: print JSON.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def launch(command: tuple[str, ...], explain: bool, as_json: bool, **flags: str | None) -> None:
    """Prepare this rank (mode, GPUs, ports, TF_CONFIG, proxies) and exec COMMAND.

    The image's entrypoint: `srun ctrain launch -- python train.py`.
    """
    from ctrain import launch as launching
    from ctrain.plan import LaunchOptions

    s = settings_from(flags)
    options = LaunchOptions.from_settings(s)
    plan = launching.prepare(options, os.environ)
    if explain:
        click.echo(launching.explain(plan, as_json))
        return
    launching.launch(plan, command, os.environ, quiet=bool(s["quiet"].value))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def doctor(as_json: bool) -> None:
    """Check this machine: runtime, cache space, Slurm, GPUs, TensorFlow, Horovod."""
    from ctrain import doctor as checks

    results = checks.run_checks(os.environ, settings_from({}))
    click.echo(checks.render(results, as_json))
    if checks.failed(results):
        sys.exit(1)


# The commands that live in their own modules (they import this one for its helpers).
from ctrain.cli_bench import bench  # noqa: E402
from ctrain.cli_data import data  # noqa: E402
from ctrain.cli_exec import exec_, run_, shell  # noqa: E402
from ctrain.cli_images import build, cache, overlay, pull  # noqa: E402
from ctrain.cli_jobs import job  # noqa: E402

for _command in (exec_, run_, shell, pull, build, overlay, cache, job, data, bench):
    main.add_command(_command)
