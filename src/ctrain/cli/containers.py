"""``ctrain exec``, ``run`` and ``shell``: one container (or host) invocation, checked first."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from ctrain.cli._options import DashDashCommand, setting_option, settings_from
from ctrain.names import PYXIS

if TYPE_CHECKING:
    from ctrain.container.spec import Action


def common(func: Any) -> Any:
    options = [
        setting_option("runtime"),
        setting_option("nv"),
        setting_option(
            "binds",
            help="Bind a path into the container, added to the binds of the variable and config "
            "files",
        ),
        setting_option("overlay"),
        click.option("--env", "env_pairs", multiple=True, help="NAME=VALUE for the container."),
        setting_option("env_file"),
        setting_option("cwd"),
        setting_option("cache_dir"),
        setting_option("allow_home_cache"),
        setting_option("dry_run"),
        setting_option("show_secrets"),
        click.argument("image", required=False),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _run(
    action: Action,
    image: str | None,
    binds: tuple[str, ...],
    env_pairs: tuple[str, ...],
    explain: bool,
    **flags: str | None,
) -> None:
    """``action`` with these flags; the ``binds`` given as options are added to the binds
    setting's (its variable's and config file's), not in their place."""
    import shlex

    from ctrain import planner
    from ctrain.container import runtimes
    from ctrain.util.secrets import masked

    ctx = click.get_current_context()
    command: tuple[str, ...] = ctx.meta["ctrain.command"]
    settings = settings_from(flags)

    planned = planner.plan(
        action,
        image=image,
        command=command,
        bind_flags=binds,
        env_pairs=env_pairs,
        settings=settings,
        environ=os.environ,
        explain=explain,
    )
    invocation = planned.invocation
    if settings.dry_run:
        reveal = settings.show_secrets
        click.echo("\n".join(runtimes.describe(invocation, os.environ, reveal)))
        pending = planned.image.pull
        if pending is not None:
            runtime = f" --runtime {PYXIS}" if pending.runtime == PYXIS else ""  # not auto's
            click.echo(
                f"  pulled first: ctrain pull{runtime} {shlex.quote(pending.ref)}, "
                f"then {pending.target} is run in its place"
            )
        for key, value in sorted(planned.image.pull_env().items()):
            click.echo(f"  pull env {key}={shlex.quote(value if reveal else masked(key, value))}")
        return
    planner.run(planned, settings, os.environ, lambda line: click.echo(f"ctrain: {line}", err=True))


@click.command("exec", cls=DashDashCommand)
@common
@setting_option("launch", help="Run CMD as given, not through ctrain launch")
@setting_option("image_python")
@click.option(
    "--explain",
    is_flag=True,
    help="Run ctrain launch --explain in IMAGE instead of CMD: each rank's plan, the image's "
    "Python that runs the launcher, and what it holds (TensorFlow, Keras, tf-keras, Horovod).",
)
def exec_(
    image: str | None,
    binds: tuple[str, ...],
    env_pairs: tuple[str, ...],
    explain: bool,
    **flags: str | None,
) -> None:
    """Run CMD in IMAGE through its entrypoint (ctrain launch): ctrain exec IMAGE -- CMD..."""
    _run("exec", image, binds, env_pairs, explain, **flags)


@click.command("run", cls=DashDashCommand)
@common
def run_(
    image: str | None, binds: tuple[str, ...], env_pairs: tuple[str, ...], **flags: str | None
) -> None:
    """Run IMAGE's runscript, with ARGS after --: ctrain run IMAGE -- ARGS..."""
    _run("run", image, binds, env_pairs, False, **flags)


@click.command("shell", cls=DashDashCommand)
@common
def shell(
    image: str | None, binds: tuple[str, ...], env_pairs: tuple[str, ...], **flags: str | None
) -> None:
    """Open an interactive shell in IMAGE."""
    _run("shell", image, binds, env_pairs, False, **flags)


@click.command("carried")
def carried() -> None:
    """Print the pyxis --container-mounts value that carries this ctrain's launcher into a
    container, read-only (the pyxis job scripts run it once in the batch step)."""
    from ctrain import planner
    from ctrain.container import carry, pyxis

    click.echo(pyxis.mounts_value(carry.binds(planner.carried_launcher())))
