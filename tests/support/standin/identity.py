"""Which program the stand-in is (Apptainer, SingularityCE, or Apptainer under its
``singularity`` compatibility name), its version, and the variable prefixes that follow."""

from __future__ import annotations

import re

APPTAINER_VERSION = "1.4.5"  # the default FAKE_APPTAINER_VERSION as apptainer
CE_VERSION = "4.5.1"  # ... and as singularity (SingularityCE)

Version = tuple[int, int, int]

# The first release that has a flag: (Apptainer, SingularityCE); the one home of these versions.
# --no-eval came with sylabs/singularity#704 (SingularityCE 3.10.0); Apptainer 1.0.0 carries
# SingularityCE's features up to 3.9.5 only (its release notes), and the port ("from sylabs 704",
# apptainer PR #86) shipped in 1.1.0. --build-arg and its companions: Apptainer 1.2.0 and
# SingularityCE 4.0.0 (facts: "build"). A version below the first is refused the flag as unknown.
FIRST_VERSION: dict[str, tuple[Version, Version]] = {
    "--no-eval": ((1, 1, 0), (3, 10, 0)),
    "--build-arg": ((1, 2, 0), (4, 0, 0)),
    "--build-arg-file": ((1, 2, 0), (4, 0, 0)),
    "--warn-unused-build-args": ((1, 2, 0), (4, 0, 0)),
}


class Fatal(Exception):
    """Apptainer's own failure: one FATAL line, exit 255."""


class Usage(Exception):
    """A command line Apptainer's parser (cobra) refuses: ``Error for command "VERB": ...``,
    exit 1 (measured on 1.4.5: not FATAL, not 255)."""


class Interrupted(Exception):
    """SIGINT or SIGTERM during a pull or build: temporary files go, then exit 255."""


class Identity:
    """``ce``: SingularityCE; otherwise Apptainer (``compat``: run as ``singularity``). A plain
    class: dataclasses would double the stand-in's start-up time."""

    def __init__(self, ce: bool, compat: bool, version: Version, version_text: str) -> None:
        self.ce, self.compat, self.version, self.version_text = ce, compat, version, version_text

    @property
    def own(self) -> tuple[str, ...]:
        """Prefixes of the variables the program reads as settings, first wins."""
        return ("SINGULARITY_",) if self.ce else ("APPTAINER_", "SINGULARITY_")

    @property
    def env_prefixes(self) -> tuple[str, ...]:
        """Prefixes that inject container variables, the preferred one first."""
        return ("SINGULARITYENV_",) if self.ce else ("APPTAINERENV_", "SINGULARITYENV_")

    @property
    def cache_dirname(self) -> str:
        return ".singularity" if self.ce else ".apptainer"

    def banner(self) -> str:
        return f"{'singularity-ce' if self.ce else 'apptainer'} version {self.version_text}"

    def has_flag(self, flag: str) -> bool:
        first = FIRST_VERSION.get(flag)
        return first is None or self.version >= first[1 if self.ce else 0]

    def setting(self, environ: dict[str, str], key: str) -> str | None:
        """APPTAINER_<KEY>, else SINGULARITY_<KEY> (Apptainer's legacy fallback)."""
        for prefix in self.own:
            if prefix + key in environ:
                return environ[prefix + key]
        return None

    def conflicts(self, environ: dict[str, str]) -> list[str]:
        """Apptainer's warnings for APPTAINER_<KEY> and SINGULARITY_<KEY> set to different
        values (the same value: nothing); SingularityCE reads only SINGULARITY_<KEY>."""
        found = []
        for key, value in sorted(environ.items()):
            other = "SINGULARITY_" + key.removeprefix("APPTAINER_")
            if not self.ce and key.startswith("APPTAINER_") and environ.get(other, value) != value:
                found.append(f"WARNING: {key} and {other} have different values, using {key}")
        return found

    def enabled(self, environ: dict[str, str], key: str) -> bool:
        """A boolean flag set through APPTAINER_<KEY> (or SINGULARITY_<KEY>)."""
        return (self.setting(environ, key) or "").lower() in ("1", "true", "yes")


def identify(program: str, environ: dict[str, str]) -> Identity:
    ce = program == "singularity" and environ.get("FAKE_APPTAINER_COMPAT") != "1"
    text = environ.get("FAKE_APPTAINER_VERSION") or (CE_VERSION if ce else APPTAINER_VERSION)
    major, minor, patch = ([int(n) for n in re.findall(r"\d+", text)] + [0, 0, 0])[:3]
    return Identity(ce, program == "singularity" and not ce, (major, minor, patch), text)
