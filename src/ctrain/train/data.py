"""Datasets for compute nodes without network: fetch on a login node, import a local folder,
load from the data directory only.

A prepared TensorFlow Datasets (TFDS) dataset lives in ``DATA_DIR/NAME[/CONFIG]/VERSION/``
(``dataset_info.json``, ``features.json`` and the record files). ``fetch`` makes one with TFDS's
own download and preparation; ``import_folder`` makes one from a class-per-subdirectory image
folder; ``load`` reads one with ``tfds.builder_from_directory``, which needs neither the
dataset's builder code nor the network.

The data directory, decided by ``data_dir`` alone for ``ctrain data`` and ``ctx.load_dataset``:
the ``data_dir`` setting (``--data-dir`` or ``load``'s ``directory`` > ``CTRAIN_DATA_DIR`` >
``./ctrain.toml`` > the user config) > ``TFDS_DATA_DIR`` > ``~/tensorflow_datasets``.
TensorFlow and TFDS are imported only when data is read or written.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctrain.errors import DataError
from ctrain.settings import resolve
from ctrain.settings_table import Settings

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
SPLIT_NAMES = ("train", "validation", "test")
INFO = "dataset_info.json"
_NAME = re.compile(r"[a-z][a-z0-9_]*")


def data_dir(settings: Settings, environ: Mapping[str, str]) -> Path:
    """The data directory: the ``data_dir`` setting as ``s`` resolved it (flag >
    CTRAIN_DATA_DIR > ./ctrain.toml > user config), else TFDS_DATA_DIR, else
    ~/tensorflow_datasets."""
    for value in (settings.data_dir, environ.get("TFDS_DATA_DIR")):
        if value:
            return _expand_home(str(value), environ)
    return _expand_home("~/tensorflow_datasets", environ)


def _expand_home(text: str, environ: Mapping[str, str]) -> Path:
    """``~`` as ``environ``'s HOME (``~user`` and an unset HOME as the system says)."""
    home = environ.get("HOME")
    if home and (text == "~" or text.startswith("~/")):
        return Path(home + text[1:])
    return Path(text).expanduser()


@dataclass(frozen=True)
class DatasetName:
    """``NAME[/CONFIG][:VERSION]`` as TFDS writes it."""

    name: str
    config: str | None = None
    version: str | None = None

    @classmethod
    def parse(cls, text: str) -> DatasetName:
        match = re.fullmatch(r"([A-Za-z0-9_]+)(?:/([A-Za-z0-9_.-]+))?(?::(\d+\.\d+\.\d+))?", text)
        if match is None:
            raise DataError(
                f"{text!r} is not a dataset name",
                "give NAME, NAME/CONFIG or NAME[/CONFIG]:X.Y.Z, e.g. mnist or mnist:3.0.1",
            )
        return cls(*match.groups())

    def __str__(self) -> str:
        text = self.name + (f"/{self.config}" if self.config else "")
        return text + (f":{self.version}" if self.version else "")


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(p) for p in path.name.split("."))


def _versions(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(
        (
            d
            for d in directory.iterdir()
            if re.fullmatch(r"\d+\.\d+\.\d+", d.name) and (d / INFO).is_file()
        ),
        key=_version_key,
    )


def prepared_dir(name: str, directory: Path) -> Path:
    """The directory of the prepared dataset ``name`` in ``directory``, from files only."""
    wanted = DatasetName.parse(name)
    root = directory / wanted.name
    if wanted.config:
        candidates = _versions(root / wanted.config)
    else:
        candidates = _versions(root)
        if not candidates and root.is_dir():
            configs = sorted(d.name for d in root.iterdir() if _versions(d))
            if len(configs) > 1:
                raise DataError(
                    f"{wanted.name} has several configs in {directory}: {', '.join(configs)}",
                    f"name one: {wanted.name}/{configs[0]}",
                )
            if configs:
                candidates = _versions(root / configs[0])
    if wanted.version:
        candidates = [c for c in candidates if c.name == wanted.version]
    if not candidates:
        raise DataError(
            f"dataset {wanted} is not prepared in {directory}",
            f"on a machine with network: ctrain data fetch {wanted} --data-dir {directory} "
            f"(or ctrain data import FOLDER --name {wanted.name}); or give the right --data-dir",
        )
    return candidates[-1]


def load(
    name: str,
    split: str,
    directory: str | os.PathLike[str] | None = None,
    as_supervised: bool = False,
    shuffle_files: bool = False,
    environ: Mapping[str, str] | None = None,
    **as_dataset: Any,
) -> Any:
    """``split`` of the prepared dataset ``name`` as a tf.data.Dataset, read from the data
    directory only (never the network): ``directory``, else the one ``ctrain data`` uses.
    ``as_supervised`` gives (input, label) pairs, from the dataset's supervised keys or, for
    imported folders, (image, label)."""
    env = os.environ if environ is None else environ
    flags = {"data_dir": os.fspath(directory) if directory else None}
    where = data_dir(resolve(flags, env, Path.cwd()), env)
    prepared = prepared_dir(name, where)  # before importing TFDS: a missing dataset fails fast

    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(str(prepared))
    keys = builder.info.supervised_keys
    if as_supervised and keys is None:
        features = builder.info.features
        if not ("image" in features and "label" in features):
            raise DataError(
                f"{name} has no supervised keys", "load it with as_supervised=False and pick keys"
            )
    dataset = builder.as_dataset(
        split=split,
        shuffle_files=shuffle_files,
        as_supervised=bool(as_supervised and keys is not None),
        **as_dataset,
    )
    if as_supervised and keys is None:
        dataset = dataset.map(lambda example: (example["image"], example["label"]))
    return dataset


def fetch(
    name: str,
    directory: Path,
    manual_dir: Path | None = None,
    tfds_module: Any = None,
) -> Path:
    """Download and prepare ``name`` into ``directory`` with TFDS (needs the network), then
    check that it loads from the files alone. Returns the prepared directory."""
    tfds = tfds_module
    if tfds is None:
        import tensorflow_datasets

        tfds = tensorflow_datasets
    directory.mkdir(parents=True, exist_ok=True)
    wanted = DatasetName.parse(name)
    config = tfds.download.DownloadConfig(manual_dir=str(manual_dir) if manual_dir else None)
    try:
        builder = tfds.builder(str(wanted), data_dir=str(directory))
    except Exception as exc:  # TFDS raises its own DatasetNotFoundError and others
        raise DataError(
            f"TensorFlow Datasets has no dataset {wanted} ({type(exc).__name__}: {exc})",
            "check the name against the TFDS catalog, or use ctrain data import for a folder",
        ) from exc
    try:
        builder.download_and_prepare(download_config=config)
    except Exception as exc:  # network, checksum, manual-download errors: all say why
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise DataError(
            f"downloading {wanted} into {directory} failed ({type(exc).__name__}: {first})",
            "run it where the network is reachable (a login node, or set https_proxy); "
            "datasets with manual downloads need --manual-dir",
        ) from exc
    prepared = prepared_dir(name, directory)
    tfds.builder_from_directory(str(prepared))  # offline: the files alone describe it
    return prepared


# ---- image folders --------------------------------------------------------------------------


@dataclass(frozen=True)
class Folder:
    """A class-per-subdirectory image folder: ``FOLDER/CLASS/*.png`` (one split, train) or
    ``FOLDER/SPLIT/CLASS/*.png`` with SPLIT among train, validation, test."""

    classes: tuple[str, ...]
    splits: dict[str, list[tuple[Path, int]]]  # split -> (image file, class index)
    ignored: tuple[Path, ...]


def _images(directory: Path) -> tuple[list[Path], list[Path]]:
    images: list[Path] = []
    other: list[Path] = []
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            (images if path.suffix.lower() in IMAGE_SUFFIXES else other).append(path)
    return images, other


def scan_folder(folder: Path) -> Folder:
    """Find the classes, splits and images of an image folder; refuse what is not one."""
    if not folder.is_dir():
        raise DataError(f"{folder} is not a directory", "give the folder of class directories")
    subdirs = sorted(d for d in folder.iterdir() if d.is_dir() and not d.name.startswith("."))
    if subdirs and all(d.name in SPLIT_NAMES for d in subdirs):
        roots = {d.name: d for d in subdirs}
    else:
        roots = {"train": folder}
    class_dirs = {
        split: sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
        for split, root in roots.items()
    }
    classes = tuple(sorted({d.name for dirs in class_dirs.values() for d in dirs}))
    if not classes:
        raise DataError(
            f"{folder} has no class directories",
            "put each class's images in its own subdirectory: FOLDER/cat/1.png, FOLDER/dog/2.png",
        )
    splits: dict[str, list[tuple[Path, int]]] = {}
    ignored: list[Path] = []
    for split, dirs in class_dirs.items():
        examples = []
        for class_dir in dirs:
            images, other = _images(class_dir)
            ignored += other
            examples += [(image, classes.index(class_dir.name)) for image in images]
        if not examples:
            raise DataError(
                f"{roots[split]} holds no images ({', '.join(IMAGE_SUFFIXES)})",
                "add images to the class directories",
            )
        splits[split] = examples
    return Folder(classes, splits, tuple(ignored))


def _check_import(name: str, version: str, channels: int | None) -> None:
    if not _NAME.fullmatch(name):
        raise DataError(
            f"--name {name!r} is not a TFDS dataset name",
            "use lower-case letters, digits and _ , starting with a letter: my_images",
        )
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise DataError(f"--version {version!r}", "give X.Y.Z, e.g. 1.0.0")
    if channels not in (None, 1, 3, 4):
        raise DataError(f"--channels {channels}", "give 1 (grey), 3 (RGB) or 4 (RGBA)")


def _clear(target: Path, overwrite: bool) -> None:
    """Make room for a dataset version: remove it with ``overwrite``, else refuse."""
    if not target.exists():
        return
    if not overwrite:
        raise DataError(
            f"{target} exists", "pass --overwrite to replace it, or give another --version"
        )
    shutil.rmtree(target)


def _store(
    folder: Path, scanned: Folder, name: str, version: str, channels: int | None, directory: Path
) -> None:
    """Write ``scanned``'s images as the TFDS dataset ``name`` ``version`` into ``directory``."""
    import tensorflow as tf
    import tensorflow_datasets as tfds

    def decode(path: Path, wanted: int) -> Any:
        return tf.io.decode_image(path.read_bytes(), channels=wanted, expand_animations=False)

    if channels is None:
        first = next(iter(scanned.splits.values()))[0][0]
        channels = int(decode(first, 0).shape[-1])
    depth = channels

    features = tfds.features.FeaturesDict(
        {
            "image": tfds.features.Image(shape=(None, None, depth)),
            "label": tfds.features.ClassLabel(names=list(scanned.classes)),
            "filename": tfds.features.Text(),
        }
    )

    def examples(items: list[tuple[Path, int]]) -> Iterator[tuple[str, dict[str, Any]]]:
        for path, label in items:
            relative = path.relative_to(folder).as_posix()
            image = decode(path, depth).numpy()
            yield relative, {"image": image, "label": label, "filename": relative}

    directory.mkdir(parents=True, exist_ok=True)
    tfds.dataset_builders.store_as_tfds_dataset(
        name=name,
        version=version,
        features=features,
        split_datasets={split: examples(items) for split, items in scanned.splits.items()},
        data_dir=str(directory),
        description=f"Imported by ctrain from the image folder {folder}",
    )


def import_folder(
    folder: Path,
    name: str,
    directory: Path,
    version: str = "1.0.0",
    channels: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Make the prepared TFDS dataset ``name`` in ``directory`` from an image folder: features
    ``image`` (uint8, ``channels`` channels, PNG), ``label`` (the class directories, sorted) and
    ``filename`` (relative to the folder). Returns the prepared directory."""
    _check_import(name, version, channels)
    scanned = scan_folder(folder)
    _clear(directory / name / version, overwrite)
    _store(folder, scanned, name, version, channels, directory)
    return prepared_dir(f"{name}:{version}", directory)


def summary(prepared: Path) -> dict[str, Any]:
    """Name, version, splits with their sizes and the class names of a prepared dataset, from
    its dataset_info.json (no TensorFlow)."""
    import json

    info = json.loads((prepared / INFO).read_text(encoding="utf-8"))
    splits = {
        s["name"]: sum(int(n) for n in s.get("shardLengths", [])) for s in info.get("splits", [])
    }
    labels = prepared / "label.labels.txt"
    classes = labels.read_text(encoding="utf-8").split() if labels.is_file() else []
    return {
        "name": info.get("name"),
        "version": info.get("version"),
        "path": str(prepared),
        "splits": splits,
        "classes": classes,
    }
