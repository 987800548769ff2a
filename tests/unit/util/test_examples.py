"""The shipped examples: listed with their descriptions, copied without replacing a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import ctrain
from ctrain.cli import main
from ctrain.errors import FileAccessError
from ctrain.util import examples
from tests.support.helpers import REPO


def test_the_shipped_examples_are_the_packages_and_the_repository_links_to_them() -> None:
    found = examples.examples()
    assert [e.name for e in found] == ["mnist_cnn.py", "resnet50_transfer.py"]
    assert all(e.path.parent == Path(ctrain.__file__).parent / "examples" for e in found)
    assert (REPO / "examples").resolve() == found[0].path.parent.resolve()
    assert (
        found[0].description
        == "An MNIST-style CNN trained through ctrain, unchanged in every mode."
    )


def test_description_is_the_docstrings_first_line() -> None:
    assert examples.description('"""One line.\n\nMore."""\nx = 1\n') == "One line."
    assert examples.description("x = 1\n") == ""


def test_listing_aligns_names() -> None:
    found = [
        examples.Example("a.py", Path("a.py"), "first"),
        examples.Example("long.py", Path("long.py"), "second"),
    ]
    assert examples.listing(found) == "a.py     first\nlong.py  second\n"


def test_copy_creates_the_directory_and_copies_every_example(tmp_path: Path) -> None:
    found = examples.examples()
    copied = examples.copy(found, tmp_path / "new" / "dir")
    assert [p.name for p in copied] == [e.name for e in found]
    assert all(p.read_bytes() == e.path.read_bytes() for p, e in zip(copied, found, strict=True))
    assert sorted(p.name for p in (tmp_path / "new" / "dir").iterdir()) == [e.name for e in found]


def test_copy_never_replaces_and_copies_nothing_then(tmp_path: Path) -> None:
    (tmp_path / "resnet50_transfer.py").write_text("mine\n")
    with pytest.raises(FileAccessError, match="resnet50_transfer.py exists; no example") as caught:
        examples.copy(examples.examples(), tmp_path)
    assert caught.value.fix
    assert (tmp_path / "resnet50_transfer.py").read_text() == "mine\n"
    assert not (tmp_path / "mnist_cnn.py").exists()


def test_examples_commands(tmp_path: Path) -> None:
    listed = CliRunner().invoke(main, ["examples", "list"], catch_exceptions=False)
    assert listed.exit_code == 0
    assert listed.output.splitlines()[0].startswith("mnist_cnn.py  ")
    copied = CliRunner().invoke(main, ["examples", "copy", str(tmp_path)])
    assert copied.exit_code == 0 and copied.output == (
        f"{tmp_path / 'mnist_cnn.py'}\n{tmp_path / 'resnet50_transfer.py'}\n"
    )
    again = CliRunner().invoke(main, ["examples", "copy", str(tmp_path)])
    assert again.exit_code == FileAccessError.exit_code
    assert again.output.startswith("ctrain: error: ") and "Fix: remove it" in again.output
