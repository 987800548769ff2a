"""The host runtime: the current Python environment (a site's venv) instead of a container."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from ctrain.container.spec import ALWAYS, RunSpec
from ctrain.errors import SpecError
from ctrain.releases import RuntimeVersion


@dataclass(frozen=True)
class Host:
    name: str = "host"
    carries_launcher: ClassVar[bool] = False  # this interpreter's own ctrain

    def argv(self, spec: RunSpec, program: str) -> list[str]:
        if spec.binds:
            raise SpecError(
                "--bind needs a container; the host runtime sees the host's files as they are",
                "drop --bind (and CTRAIN_BINDS) or choose a container runtime",
            )
        if spec.overlay is not None:
            raise SpecError("--overlay needs apptainer or singularity", "drop --overlay")
        if spec.workdir is not None:
            raise SpecError(
                "--cwd needs a container; the host runtime runs where ctrain runs",
                "cd to the directory first and drop --cwd (and CTRAIN_CWD)",
            )
        if spec.action == "shell":
            return ["/bin/bash"] if not spec.command else list(spec.command)
        if spec.action == "run":
            raise SpecError("the host runtime has no runscript", "use ctrain exec -- CMD")
        return list(spec.command)

    def process_env(self, spec: RunSpec, environ: Mapping[str, str]) -> dict[str, str]:
        """The whole host environment stays (modules, venv); the asked variables are added."""
        return {**environ, **spec.env, **ALWAYS}

    def probed(self, program: str, version_of: Callable[[str], RuntimeVersion]) -> Host:
        return self

    def notes(self, spec: RunSpec) -> list[str]:
        return []

    def image_file(self, image: str) -> str | None:
        return None
