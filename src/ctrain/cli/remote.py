"""``ctrain remote add|list|remove|close``: the named clusters ``--on NAME`` reaches over SSH."""

from __future__ import annotations

import os

import click


@click.group("remote")
def remote() -> None:
    """Name clusters to submit to and watch from here, over one SSH connection each.

    The names live in $XDG_CONFIG_HOME/ctrain/remotes.toml; how a host is reached (keys,
    agent, ProxyJump, port) is your ~/.ssh/config's.
    """


@remote.command("add")
@click.argument("name")
@click.argument("host", metavar="[USER@]HOST")
@click.option(
    "--workdir", default="ctrain-jobs", show_default=True,
    help="Where submissions go on the cluster (relative: under your home there).",
)  # fmt: skip
@click.option(
    "--ctrain", "ctrain_path", default="ctrain", show_default=True,
    help="The cluster's ctrain command, if it is not on PATH there.",
)  # fmt: skip
@click.option(
    "--ssh-config", type=click.Path(dir_okay=False, exists=True),
    help="An ssh config file to use instead of ~/.ssh/config (ssh -F).",
)  # fmt: skip
def add(name: str, host: str, workdir: str, ctrain_path: str, ssh_config: str | None) -> None:
    """Name a cluster (or change one): ctrain remote add NAME [USER@]HOST."""
    from ctrain.remote import registry

    path = registry.remotes_path(os.environ)
    config = os.path.abspath(ssh_config) if ssh_config else ""
    entry = registry.checked(registry.Remote(name, host, workdir, ctrain_path, config))
    remotes = registry.read(path)
    registry.write(path, {**remotes, name: entry})
    click.echo(f"{'changed' if name in remotes else 'added'} {name}: {host} ({path})")


@remote.command("list")
def list_() -> None:
    """The named clusters, and whether a connection to each is open."""
    from ctrain.remote import commands, registry
    from ctrain.util import proc

    remotes = registry.read(registry.remotes_path(os.environ))
    control = commands.control_dir(os.environ)
    for name, entry in sorted(remotes.items()):
        is_open = proc.run(commands.check_argv(entry, control), os.environ).returncode == 0
        click.echo(
            f"{name:<16} {entry.host:<28} {entry.workdir:<20} "
            f"{'connected' if is_open else 'closed'}"
        )


@remote.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Forget a cluster (its connection is closed first)."""
    from ctrain.remote import registry, session

    path = registry.remotes_path(os.environ)
    remotes = registry.read(path)
    entry = registry.find(remotes, name, path)
    session.close(entry, os.environ)
    registry.write(path, {n: r for n, r in remotes.items() if n != name})
    click.echo(f"removed {name}")


@remote.command("close")
@click.argument("name")
def close(name: str) -> None:
    """End the SSH connection to a cluster (the next command logs in again)."""
    from ctrain.remote import registry, session

    path = registry.remotes_path(os.environ)
    entry = registry.find(registry.read(path), name, path)
    click.echo(f"closed {name}" if session.close(entry, os.environ) else f"{name}: none open")
