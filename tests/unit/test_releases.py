"""The runtime's ``--version`` asked once per program file, then read from ctrain's cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ctrain import releases

PROGRAM = """#!/bin/sh
echo run >> "{count}"
echo "apptainer version {version}"
"""


def program(tmp_path: Path, version: str = "1.4.5") -> tuple[Path, Path]:
    """A fake apptainer that counts its runs in ``count``."""
    path, count = tmp_path / "bin" / "apptainer", tmp_path / "runs"
    path.parent.mkdir(exist_ok=True)
    temp = path.with_name(".new")
    temp.write_text(PROGRAM.format(count=count, version=version))
    temp.chmod(0o755)
    os.replace(temp, path)  # a new file, as an upgrade installs one
    return path, count


def runs(count: Path) -> int:
    return len(count.read_text().splitlines()) if count.exists() else 0


@pytest.mark.parametrize(
    ("environ", "where"),
    [
        ({"XDG_CACHE_HOME": "/c", "HOME": "/h"}, "/c/ctrain/runtime-versions.json"),
        ({"XDG_CACHE_HOME": "", "HOME": "/h"}, "/h/.cache/ctrain/runtime-versions.json"),
        ({"HOME": "/h"}, "/h/.cache/ctrain/runtime-versions.json"),
        ({"HOME": ""}, None),
        ({}, None),
    ],
)
def test_cache_file(environ: dict[str, str], where: str | None) -> None:
    found = releases.cache_file(environ)
    assert (str(found) if found else None) == where


def test_asked_once_then_read_and_asked_again_when_the_file_changes(tmp_path: Path) -> None:
    path, count = program(tmp_path)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    first = releases.installed_version(str(path), env)
    second = releases.installed_version(str(path), env)
    assert first == second == releases.RuntimeVersion("apptainer", (1, 4, 5), first.text)
    assert runs(count) == 1
    program(tmp_path, "1.5.3")  # upgraded in place
    upgraded = releases.installed_version(str(path), env)
    assert upgraded.number == (1, 5, 3) and runs(count) == 2
    recorded = json.loads((tmp_path / "cache" / releases.CACHE_FILE).read_text())
    assert recorded == {
        str(path): {"file": releases.identity(str(path))[1], "version": "apptainer version 1.5.3"}  # type: ignore[index]
    }


def test_a_link_is_recorded_under_the_file_it_names(tmp_path: Path) -> None:
    path, count = program(tmp_path)
    link = tmp_path / "apptainer-link"
    link.symlink_to(path)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    releases.installed_version(str(link), env)
    releases.installed_version(str(path), env)
    assert runs(count) == 1


@pytest.mark.parametrize("content", ["", "{not json", "[]", '{"x": 1}'])
def test_a_damaged_cache_is_passed_over_and_written_anew(tmp_path: Path, content: str) -> None:
    path, count = program(tmp_path)
    cache = tmp_path / "cache" / releases.CACHE_FILE
    cache.parent.mkdir(parents=True)
    cache.write_text(content)
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert releases.installed_version(str(path), env).number == (1, 4, 5)
    assert releases.installed_version(str(path), env).number == (1, 4, 5)
    assert runs(count) == 1


@pytest.mark.parametrize("line", ["garbage", 145, ["apptainer version 1.4.5"], None])
def test_a_recorded_line_that_is_no_version_is_asked_again(tmp_path: Path, line: object) -> None:
    path, count = program(tmp_path)
    key = releases.identity(str(path))
    assert key is not None
    cache = tmp_path / "cache" / releases.CACHE_FILE
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({key[0]: {"file": key[1], "version": line}}))
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert releases.installed_version(str(path), env).number == (1, 4, 5)
    assert runs(count) == 1


def test_the_cache_file_is_the_same_whichever_program_was_asked_first(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, _ = program(tmp_path / "a")
    second, _ = program(tmp_path / "b", "1.3.6")
    texts = []
    for order, cache in (((first, second), "one"), ((second, first), "two")):
        env = {"XDG_CACHE_HOME": str(tmp_path / cache)}
        for path in order:
            releases.installed_version(str(path), env)
        texts.append((tmp_path / cache / releases.CACHE_FILE).read_text())
    a, b = releases.identity(str(first)), releases.identity(str(second))
    assert a is not None and b is not None
    assert texts == 2 * [
        "{\n"
        f' "{first}": {{\n  "file": "{a[1]}",\n  "version": "apptainer version 1.4.5"\n }},\n'
        f' "{second}": {{\n  "file": "{b[1]}",\n  "version": "apptainer version 1.3.6"\n }}\n'
        "}\n"
    ]


def test_no_cache_to_write_still_answers(tmp_path: Path) -> None:
    path, count = program(tmp_path)
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    for env in ({"XDG_CACHE_HOME": str(blocked)}, {}):
        assert releases.installed_version(str(path), env).number == (1, 4, 5)
    assert runs(count) == 2  # asked each time
    assert blocked.read_text() == ""
