"""Which Apptainer or SingularityCE is installed, and what it can do: one table, one parser.

``PROGRAM --version`` prints one line: ``apptainer version 1.4.5`` (Apptainer, and its
compatibility command ``singularity``), ``singularity-ce version 4.5.1`` (SingularityCE) or
``singularity version 3.8.7`` (Singularity before the 2021 split). Packagers append release
suffixes (``1.3.6-1.el9``, ``4.1.0-jammy``), which are ignored.

The answer is kept in ``$XDG_CACHE_HOME/ctrain/runtime-versions.json`` (``~/.cache``), keyed by
the program's real path and that file's device, inode, size and modification time: every rank
of every job would otherwise start one more apptainer process before its own (about 90 ms here).
A program replaced or upgraded in place is a new file and is asked again; a cache that cannot be
read or written is passed over.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NamedTuple

from ctrain.errors import ExternalToolError
from ctrain.util import fs, proc

Flavour = Literal["apptainer", "singularity-ce", "singularity"]
Number = tuple[int, int, int]
Feature = Literal["--no-eval", "--build-arg", "PREPEND_LD_LIBRARY_PATH"]

# The first release of each flavour that has each feature, from the projects' CHANGELOG.md
# (Singularity, up to 3.8.7, has neither):
# --no-eval (inject APPTAINERENV_/SINGULARITYENV_/--env values verbatim): Apptainer 1.1.0
# (2022-09-27), SingularityCE 3.10.0 (2022-05-17).
# --build-arg (and %arguments, {{ NAME }} in def files): Apptainer 1.2.0 (2023-07-18),
# SingularityCE 4.0.0 (2023-09-19).
# PREPEND_LD_LIBRARY_PATH (a container variable put before LD_LIBRARY_PATH), added with the
# change that puts --nv's /.singularity.d/libs after the image's default library directories:
# Apptainer 1.5.0 (apptainer#3293, #3346); not in SingularityCE.
FIRST_WITH: dict[Feature, dict[Flavour, Number | None]] = {
    "--no-eval": {"apptainer": (1, 1, 0), "singularity-ce": (3, 10, 0), "singularity": None},
    "--build-arg": {"apptainer": (1, 2, 0), "singularity-ce": (4, 0, 0), "singularity": None},
    "PREPEND_LD_LIBRARY_PATH": {
        "apptainer": (1, 5, 0),
        "singularity-ce": None,
        "singularity": None,
    },
}
NAMES: dict[Flavour, str] = {
    "apptainer": "Apptainer",
    "singularity-ce": "SingularityCE",
    "singularity": "Singularity",
}
VERSION_TIMEOUT = 30.0
CACHE_FILE = os.path.join("ctrain", "runtime-versions.json")  # under $XDG_CACHE_HOME
_LINE = re.compile(r"^(apptainer|singularity-ce|singularity) version v?(\d+)\.(\d+)(?:\.(\d+))?")


class RuntimeVersion(NamedTuple):
    flavour: Flavour
    number: Number
    text: str  # the line as printed

    def has(self, feature: Feature) -> bool:
        first = FIRST_WITH[feature][self.flavour]
        return first is not None and self.number >= first


def needs(feature: Feature) -> str:
    """The releases that have ``feature``: ``Apptainer >= 1.2 or SingularityCE >= 4.0``."""
    firsts = FIRST_WITH[feature].items()
    return " or ".join(
        f"{NAMES[flavour]} >= {'.'.join(map(str, first[:2]))}"
        for flavour, first in firsts
        if first is not None
    )


def version_argv(program: str) -> list[str]:
    return [program, "--version"]


def parse_version(output: str, program: str) -> RuntimeVersion:
    """The version in ``PROGRAM --version``'s output (warnings before it are skipped)."""
    for line in output.splitlines():
        version_line = _LINE.match(line.strip())
        if version_line:
            flavour: Flavour = version_line.group(1)  # type: ignore[assignment]
            major, minor, patch = (int(version_line.group(n) or 0) for n in (2, 3, 4))
            return RuntimeVersion(flavour, (major, minor, patch), line.strip())
    shown = proc.last_line(output) or "nothing"
    raise ExternalToolError(
        f"cannot tell which release {program} is: `{program} --version` printed {shown!r}",
        f"load a module of {needs('--no-eval')}, "
        "or choose another runtime: --runtime docker|podman|host",
    )


def cache_file(environ: Mapping[str, str]) -> Path | None:
    """Where answers are kept: ``$XDG_CACHE_HOME/ctrain/...``, else ``$HOME/.cache/ctrain/...``;
    None without either."""
    base = environ.get("XDG_CACHE_HOME") or (
        os.path.join(environ["HOME"], ".cache") if environ.get("HOME") else ""
    )
    return Path(base, CACHE_FILE) if base else None


def identity(program: str) -> tuple[str, str] | None:
    """The program's real path and its file's identity (device, inode, size, mtime), or None
    when it cannot be read."""
    try:
        real = os.path.realpath(program)
        st = os.stat(real)
    except OSError:
        return None
    return real, f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _recorded(path: Path) -> dict[str, dict[str, str]]:
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return records if isinstance(records, dict) else {}


def recall(path: Path, key: tuple[str, str]) -> str | None:
    """The version line recorded for this program file, if it is the same file."""
    entry = _recorded(path).get(key[0])
    if isinstance(entry, dict) and entry.get("file") == key[1]:
        line = entry.get("version")
        return line if isinstance(line, str) else None
    return None


def remember(path: Path, key: tuple[str, str], line: str) -> None:
    """Record ``line`` for this program file; a failure only costs the next call a probe."""
    entries = _recorded(path)
    entries[key[0]] = {"file": key[1], "version": line}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fs.write_text(path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass


def installed_version(program: str, environ: Mapping[str, str]) -> RuntimeVersion:
    """The release of ``program``: as recorded for this very file, else ``program --version``
    (recorded for the next call)."""
    where = cache_file(environ)
    key = identity(program)
    if where is not None and key is not None:
        line = recall(where, key)
        if line is not None and _LINE.match(line):
            return parse_version(line, program)
    output = proc.check(version_argv(program), environ, VERSION_TIMEOUT)
    version = parse_version(output, program)
    if where is not None and key is not None:
        remember(where, key, version.text)
    return version
