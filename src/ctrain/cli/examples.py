"""``ctrain examples list|copy DIR``: the example training scripts shipped with ctrain."""

from __future__ import annotations

from pathlib import Path

import click


@click.group("examples")
def examples() -> None:
    """The example training scripts shipped with ctrain, to read and copy.

    The synthetic benchmark `ctrain bench` runs is a module: python -m ctrain.bench.synthetic.
    """


@examples.command("list")
def list_() -> None:
    """Each example's file name and what it trains."""
    from ctrain.util import examples as shipped

    click.echo(shipped.listing(shipped.examples()), nl=False)


@examples.command("copy")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
def copy(directory: Path) -> None:
    """Copy the examples into DIRECTORY (created if missing); an existing file is never
    replaced."""
    from ctrain.util import examples as shipped

    for path in shipped.copy(shipped.examples(), directory):
        click.echo(str(path))
