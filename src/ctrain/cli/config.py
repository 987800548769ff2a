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

    from ctrain.settings_table import SETTINGS

    resolved = settings_from({})
    effective = [(s, getattr(resolved, s.name), resolved.sources[s.name]) for s in SETTINGS]
    if as_json:
        rows = {
            setting.name: {
                "value": list(value) if isinstance(value, tuple) else value,
                "source": source,
                "env": setting.env,
            }
            for setting, value, source in effective
        }
        click.echo(json.dumps(rows, indent=2))
        return
    for setting, value, source in effective:
        shown = ",".join(value) if isinstance(value, tuple) else value
        click.echo(f"{setting.name:<20} {shown!s:<42} {source}")
