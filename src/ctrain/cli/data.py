"""``ctrain data fetch|import|show``: datasets prepared on a login node, read offline."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from ctrain.cli._options import setting_option, settings_from

if TYPE_CHECKING:
    from pathlib import Path


def _where(flag: str | None) -> Path:
    """The data directory, as ``ctx.load_dataset`` finds it too."""
    from ctrain.train.data import data_dir

    return data_dir(settings_from({"data_dir": flag}), os.environ)


def _report(prepared: Path, where: Path, as_json: bool) -> None:
    import json

    from ctrain.train.data import summary

    dataset = summary(prepared)
    if as_json:
        click.echo(json.dumps(dataset, indent=2))
        return
    splits = ", ".join(f"{name} {count}" for name, count in dataset["splits"].items())
    click.echo(f"{dataset['name']} {dataset['version']} in {dataset['path']}: {splits}")
    if dataset["classes"]:
        click.echo(f"  classes: {', '.join(dataset['classes'])}")
    split = "train" if "train" in dataset["splits"] else next(iter(dataset["splits"]), "train")
    click.echo(
        f"  offline in training: ctx.load_dataset({dataset['name']!r}, {split!r}, "
        f"data_dir={str(where)!r})"
    )


@click.group("data")
def data() -> None:
    """Fetch and import datasets for compute nodes without network (TensorFlow Datasets)."""


@data.command("fetch")
@click.argument("name")
@setting_option("data_dir")
@click.option("--manual-dir", type=click.Path(file_okay=False), help="Manually downloaded files.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def fetch(name: str, data_dir: str | None, manual_dir: str | None, as_json: bool) -> None:
    """Download and prepare TFDS dataset NAME (on a login node, with network) so that compute
    nodes load it from the data directory offline: NAME, NAME/CONFIG or NAME:X.Y.Z."""
    from pathlib import Path

    from ctrain.train import data as datasets

    where = _where(data_dir)
    prepared = datasets.fetch(name, where, Path(manual_dir) if manual_dir else None)
    _report(prepared, where, as_json)


@data.command("import")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option("--name", required=True, help="Dataset name (lower case, digits, _).")
@setting_option("data_dir")
@click.option("--version", "version", default="1.0.0", show_default=True, help="X.Y.Z")
@click.option("--channels", type=click.Choice(["1", "3", "4"]), help="[default: the first image's]")
@click.option("--overwrite", is_flag=True, help="Replace the same name and version.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def import_(
    folder: str,
    name: str,
    data_dir: str | None,
    version: str,
    channels: str | None,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Make a TFDS dataset from an image FOLDER with one subdirectory per class (FOLDER/CLASS/
    or FOLDER/{train,validation,test}/CLASS/), loadable offline."""
    from pathlib import Path

    from ctrain.train import data as datasets

    where = _where(data_dir)
    prepared = datasets.import_folder(
        Path(folder),
        name,
        where,
        version=version,
        channels=int(channels) if channels else None,
        overwrite=overwrite,
    )
    _report(prepared, where, as_json)


@data.command("show")
@click.argument("name")
@setting_option("data_dir")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def show(name: str, data_dir: str | None, as_json: bool) -> None:
    """Where dataset NAME is prepared in the data directory, its splits and classes (offline)."""
    from ctrain.train import data as datasets

    where = _where(data_dir)
    _report(datasets.prepared_dir(name, where), where, as_json)
