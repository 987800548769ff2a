"""Offline data: the data directory, dataset names, prepared datasets found from their files,
image folders scanned, and `data fetch` driving TFDS (a fake here: no network on this machine)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from ctrain.cli import main
from ctrain.distributed import Context, Launched
from ctrain.errors import DataError
from ctrain.names import Mode
from ctrain.settings import resolve
from ctrain.train import data
from ctrain.train.data import DatasetName


def prepare(root: Path, *parts: str, splits: dict[str, int] | None = None) -> Path:
    """A prepared-dataset directory as TFDS leaves it (only the files ctrain reads)."""
    path = root.joinpath(*parts)
    path.mkdir(parents=True)
    info = {
        "name": parts[0],
        "version": parts[-1],
        "splits": [
            {"name": name, "shardLengths": [str(count)]}
            for name, count in (splits or {"train": 3}).items()
        ],
    }
    (path / "dataset_info.json").write_text(json.dumps(info))
    return path


def test_data_dir_precedence(tmp_path: Path) -> None:
    """flag > CTRAIN_DATA_DIR > ./ctrain.toml > user config > TFDS_DATA_DIR >
    ~/tensorflow_datasets."""
    home = tmp_path / "home"
    (home / ".config" / "ctrain").mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()

    def where(flag: str | None, **environ: str) -> Path:
        environ = {"HOME": str(home), **environ}
        return data.data_dir(resolve({"data_dir": flag}, environ, project), environ)

    assert where(None) == home / "tensorflow_datasets"
    assert where(None, TFDS_DATA_DIR="/tfds") == Path("/tfds")
    (home / ".config" / "ctrain" / "config.toml").write_text('data_dir = "/user"\n')
    assert where(None, TFDS_DATA_DIR="/tfds") == Path("/user")
    (project / "ctrain.toml").write_text('data_dir = "~/project"\n')
    assert where(None, TFDS_DATA_DIR="/tfds") == home / "project"
    assert where(None, CTRAIN_DATA_DIR="/ctrain") == Path("/ctrain")
    assert where("/flag", CTRAIN_DATA_DIR="/ctrain") == Path("/flag")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("mnist", DatasetName("mnist")),
        ("mnist:3.0.1", DatasetName("mnist", None, "3.0.1")),
        ("imagenet2012/subset:5.0.0", DatasetName("imagenet2012", "subset", "5.0.0")),
        ("cifar10/plain", DatasetName("cifar10", "plain")),
    ],
)
def test_dataset_names(text: str, parsed: DatasetName) -> None:
    assert DatasetName.parse(text) == parsed
    assert str(parsed) == text


@pytest.mark.parametrize("text", ["", "mnist:3", "../etc", "a b", "mnist:latest"])
def test_bad_dataset_names(text: str) -> None:
    with pytest.raises(DataError, match="not a dataset name"):
        DatasetName.parse(text)


def test_prepared_dir_picks_the_newest_version(tmp_path: Path) -> None:
    prepare(tmp_path, "mnist", "3.0.1")
    newest = prepare(tmp_path, "mnist", "3.0.10")
    (tmp_path / "mnist" / "4.0.0").mkdir()  # being prepared: no dataset_info.json yet
    assert data.prepared_dir("mnist", tmp_path) == newest
    assert data.prepared_dir("mnist:3.0.1", tmp_path) == tmp_path / "mnist" / "3.0.1"


def test_prepared_dir_with_configs(tmp_path: Path) -> None:
    one = prepare(tmp_path, "cifar", "plain", "1.0.0")
    assert data.prepared_dir("cifar", tmp_path) == one
    assert data.prepared_dir("cifar/plain", tmp_path) == one
    prepare(tmp_path, "cifar", "corrupted", "1.0.0")
    with pytest.raises(DataError, match="several configs") as info:
        data.prepared_dir("cifar", tmp_path)
    assert "cifar/corrupted" in info.value.fix


def test_a_missing_dataset_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        data.prepared_dir("mnist:3.0.1", tmp_path)
    assert "not prepared in" in info.value.message
    assert f"ctrain data fetch mnist:3.0.1 --data-dir {tmp_path}" in info.value.fix


def image_folder(root: Path, layout: dict[str, list[str]]) -> Path:
    for relative, names in layout.items():
        (root / relative).mkdir(parents=True, exist_ok=True)
        for name in names:
            (root / relative / name).write_bytes(b"not decoded here")
    return root


def test_scan_folder_of_classes(tmp_path: Path) -> None:
    folder = image_folder(
        tmp_path / "pets",
        {"dog": ["b.png", "a.JPG", "notes.txt"], "cat": ["1.png"], ".hidden": ["x.png"]},
    )
    found = data.scan_folder(folder)
    assert found.classes == ("cat", "dog")
    assert list(found.splits) == ["train"]
    assert [(p.name, label) for p, label in found.splits["train"]] == [
        ("1.png", 0),
        ("a.JPG", 1),
        ("b.png", 1),
    ]
    assert [p.name for p in found.ignored] == ["notes.txt"]


def test_scan_folder_with_splits(tmp_path: Path) -> None:
    folder = image_folder(
        tmp_path / "f",
        {"train/a": ["1.png"], "train/b": ["2.png"], "test/b": ["3.png"]},
    )
    found = data.scan_folder(folder)
    assert found.classes == ("a", "b")
    assert {split: [label for _, label in items] for split, items in found.splits.items()} == {
        "test": [1],
        "train": [0, 1],
    }


@pytest.mark.parametrize(
    ("layout", "message"),
    [({}, "no class directories"), ({"a": ["x.txt"]}, "holds no images")],
)
def test_scan_folder_refuses_what_is_not_an_image_folder(
    tmp_path: Path, layout: dict[str, list[str]], message: str
) -> None:
    folder = image_folder(tmp_path / "f", layout)
    folder.mkdir(exist_ok=True)
    with pytest.raises(DataError, match=message):
        data.scan_folder(folder)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "My-Set"}, "not a TFDS dataset name"),
        ({"name": "ok", "version": "1"}, "--version"),
        ({"name": "ok", "channels": 2}, "--channels"),
    ],
)
def test_import_refuses_bad_names_before_reading(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(DataError, match=message):
        data.import_folder(tmp_path, directory=tmp_path / "out", **kwargs)


def test_import_refuses_to_overwrite(tmp_path: Path) -> None:
    folder = image_folder(tmp_path / "f", {"a": ["1.png"]})
    (tmp_path / "out" / "mine" / "1.0.0").mkdir(parents=True)
    with pytest.raises(DataError, match="exists") as info:
        data.import_folder(folder, "mine", tmp_path / "out")
    assert "--overwrite" in info.value.fix


class FakeTfds:
    """Records what `fetch` asks of TFDS; the 'download' writes a prepared dataset."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        fake = self

        class DownloadConfig:
            def __init__(self, manual_dir: str | None = None) -> None:
                self.manual_dir = manual_dir

        class Builder:
            def __init__(self, name: str, data_dir: str) -> None:
                self.name, self.data_dir = name, data_dir

            def download_and_prepare(self, download_config: Any) -> None:
                fake.calls.append(("download_and_prepare", download_config.manual_dir))
                prepare(Path(self.data_dir), self.name.split(":")[0], "3.0.1")

        self.download = type("download", (), {"DownloadConfig": DownloadConfig})

        def builder(name: str, data_dir: str) -> Builder:
            fake.calls.append(("builder", (name, data_dir)))
            return Builder(name, data_dir)

        def builder_from_directory(path: str) -> Any:
            fake.calls.append(("builder_from_directory", path))
            info = SimpleNamespace(supervised_keys=None, features={})
            return SimpleNamespace(info=info, as_dataset=lambda split, **_: f"{split} of {path}")

        self.builder = builder
        self.builder_from_directory = builder_from_directory


def test_fetch_downloads_then_checks_the_files_alone(tmp_path: Path) -> None:
    fake = FakeTfds()
    prepared = data.fetch("mnist", tmp_path / "dd", tmp_path / "manual", tfds_module=fake)
    assert prepared == tmp_path / "dd" / "mnist" / "3.0.1"
    assert fake.calls == [
        ("builder", ("mnist", str(tmp_path / "dd"))),
        ("download_and_prepare", str(tmp_path / "manual")),
        ("builder_from_directory", str(prepared)),
    ]


def test_fetch_failures_say_why(tmp_path: Path) -> None:
    fake = FakeTfds()

    def offline(self: Any, download_config: Any) -> None:
        raise ConnectionError("Failed to establish a new connection\nmore detail")

    builder = fake.builder("x", "y")
    type(builder).download_and_prepare = offline
    fake.builder = lambda name, data_dir: builder
    with pytest.raises(DataError) as info:
        data.fetch("mnist", tmp_path, tfds_module=fake)
    assert "ConnectionError: Failed to establish a new connection)" in info.value.message
    assert "login node" in info.value.fix

    def unknown(name: str, data_dir: str) -> None:
        raise KeyError(name)

    fake.builder = unknown
    with pytest.raises(DataError, match="has no dataset nosuch"):
        data.fetch("nosuch", tmp_path, tfds_module=fake)


def test_data_cli_fetch_and_show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTfds()
    real_fetch = data.fetch
    monkeypatch.setattr(
        data,
        "fetch",
        lambda *a, **k: real_fetch(*a, **k, tfds_module=fake),  # no network here
    )
    monkeypatch.setenv("CTRAIN_DATA_DIR", str(tmp_path / "dd"))
    result = CliRunner().invoke(main, ["data", "fetch", "mnist"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert f"mnist 3.0.1 in {tmp_path / 'dd' / 'mnist' / '3.0.1'}: train 3" in result.output
    assert f"ctx.load_dataset('mnist', 'train', data_dir='{tmp_path / 'dd'}')" in result.output
    shown = CliRunner().invoke(main, ["data", "show", "mnist", "--json"], catch_exceptions=False)
    assert json.loads(shown.output)["splits"] == {"train": 3}


@pytest.mark.parametrize("configured_by", ["ctrain.toml", "CTRAIN_DATA_DIR"])
def test_data_fetch_and_load_dataset_agree(
    configured_by: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ctrain data fetch` prepares a dataset where `ctx.load_dataset` then reads it, when the
    data directory comes from ./ctrain.toml or from CTRAIN_DATA_DIR (neither is told it)."""
    fake = FakeTfds()
    real_fetch = data.fetch
    monkeypatch.setattr(data, "fetch", lambda *a, **k: real_fetch(*a, **k, tfds_module=fake))
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", fake)  # load's TFDS: no TF here
    for name in ("CTRAIN_DATA_DIR", "TFDS_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    where = tmp_path / "datasets"
    if configured_by == "ctrain.toml":
        (tmp_path / "ctrain.toml").write_text(f'data_dir = "{where}"\n')
    else:
        monkeypatch.setenv("CTRAIN_DATA_DIR", str(where))

    fetched = CliRunner().invoke(main, ["data", "fetch", "mnist", "--json"])
    assert fetched.exit_code == 0, fetched.output
    prepared = json.loads(fetched.stdout)["path"]
    assert prepared == str(where / "mnist" / "3.0.1")

    ctx = Context(
        Launched(
            mode=Mode.SINGLE,
            rank=0,
            size=1,
            local_rank=0,
            local_size=1,
            collective="ring",
            collective_timeout=600,
        ),
        strategy=None,
    )
    assert ctx.load_dataset("mnist", "train") == f"train of {prepared}"


def test_data_cli_missing_dataset_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["data", "show", "mnist", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "ctrain data fetch mnist" in lines[0]
