"""Which Apptainer or SingularityCE is installed, and what it can do: one table, one parser.

``PROGRAM --version`` prints one line: ``apptainer version 1.4.5`` (Apptainer, and its
compatibility command ``singularity``), ``singularity-ce version 4.5.1`` (SingularityCE) or
``singularity version 3.8.7`` (Singularity before the 2021 split). Packagers append release
suffixes (``1.3.6-1.el9``, ``4.1.0-jammy``), which are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ctrain.errors import ExternalToolError
from ctrain.util import proc

Flavour = Literal["apptainer", "singularity-ce", "singularity"]
Number = tuple[int, int, int]
Feature = Literal["--no-eval", "--build-arg"]

# The first release of each flavour that has each feature, from the projects' CHANGELOG.md
# (Singularity, up to 3.8.7, has neither):
# --no-eval (inject APPTAINERENV_/SINGULARITYENV_/--env values verbatim): Apptainer 1.1.0
# (2022-09-27), SingularityCE 3.10.0 (2022-05-17).
# --build-arg (and %arguments, {{ NAME }} in def files): Apptainer 1.2.0 (2023-07-18),
# SingularityCE 4.0.0 (2023-09-19).
FIRST_WITH: dict[Feature, dict[Flavour, Number | None]] = {
    "--no-eval": {"apptainer": (1, 1, 0), "singularity-ce": (3, 10, 0), "singularity": None},
    "--build-arg": {"apptainer": (1, 2, 0), "singularity-ce": (4, 0, 0), "singularity": None},
}
NAMES: dict[Flavour, str] = {
    "apptainer": "Apptainer",
    "singularity-ce": "SingularityCE",
    "singularity": "Singularity",
}
VERSION_TIMEOUT = 30.0
_LINE = re.compile(r"^(apptainer|singularity-ce|singularity) version v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class RuntimeVersion:
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
        found = _LINE.match(line.strip())
        if found:
            flavour: Flavour = found.group(1)  # type: ignore[assignment]
            major, minor, patch = (int(found.group(n) or 0) for n in (2, 3, 4))
            return RuntimeVersion(flavour, (major, minor, patch), line.strip())
    shown = proc.last_line(output) or "nothing"
    raise ExternalToolError(
        f"cannot tell which release {program} is: `{program} --version` printed {shown!r}",
        f"load a module of {needs('--no-eval')}, "
        "or choose another runtime: --runtime docker|podman|host",
    )


def installed_version(program: str, environ: Mapping[str, str]) -> RuntimeVersion:
    """Asks ``program --version`` (one short process per ctrain exec, nothing cached)."""
    output = proc.check(version_argv(program), environ, VERSION_TIMEOUT)
    return parse_version(output, program)
