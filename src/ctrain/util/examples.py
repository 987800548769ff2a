"""The example training scripts shipped with ctrain (ctrain/examples/*.py): what they are, and
copies of them for users to start from. Copying never replaces a file."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from typing import NamedTuple

from ctrain.errors import FileAccessError
from ctrain.util import fs
from ctrain.util.shipped import shipped_dir


class Example(NamedTuple):
    name: str  # the file name, e.g. mnist_cnn.py
    path: Path
    description: str  # the first line of its docstring


def description(source: str) -> str:
    """The first line of a module's docstring ("" without one)."""
    docstring = ast.get_docstring(ast.parse(source)) or ""
    return docstring.strip().split("\n", 1)[0]


def examples(directory: Path | None = None) -> list[Example]:
    """The shipped examples (or the scripts in ``directory``), by name."""
    where = shipped_dir("examples") if directory is None else directory
    return [
        Example(path.name, path, description(path.read_text(encoding="utf-8")))
        for path in sorted(where.glob("*.py"))
    ]


def listing(found: list[Example]) -> str:
    """One line per example: its name and what it is."""
    width = max((len(e.name) for e in found), default=0)
    return "".join(f"{e.name:<{width}}  {e.description}\n" for e in found)


def copy(found: list[Example], destination: Path) -> list[Path]:
    """Copy the examples into ``destination`` (created if missing); the new files. Nothing is
    copied when one of them is there already."""
    targets = [destination / e.name for e in found]
    for target in targets:
        if target.exists() or target.is_symlink():
            raise FileAccessError(
                f"{target} exists; no example was copied",
                "remove it, or give another directory",
            )
    destination.mkdir(parents=True, exist_ok=True)
    for example, target in zip(found, targets, strict=True):
        try:
            with fs.atomic(target, replace=False) as temp:
                shutil.copyfile(example.path, temp)
        except FileExistsError:  # appeared meanwhile: still never replaced
            raise FileAccessError(
                f"{target} appeared while copying; it was left as it is",
                "remove it, or give another directory",
            ) from None
    return targets
