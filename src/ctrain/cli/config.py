"""``ctrain config show``: every effective setting and where it came from."""

from __future__ import annotations

import click

from ctrain.cli._options import settings_from


@click.group()
def config() -> None:
    """Show the effective settings."""


@config.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def config_show(as_json: bool) -> None:
    """Every effective setting and where it came from."""
    import json

    from ctrain.settings import BY_NAME

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
