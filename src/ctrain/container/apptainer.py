"""Apptainer and SingularityCE: pure argv and environment builders.

The container starts with ``--cleanenv`` (no host PYTHONPATH, LD_LIBRARY_PATH, ...); the chosen
variables travel as ``APPTAINERENV_NAME`` (``SINGULARITYENV_`` for singularity), which carries
any value, commas and newlines included, unlike ``--env A=1,B=2``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ctrain.container.spec import Bind, RunSpec
from ctrain.errors import SpecError
from ctrain.names import is_remote


def _bind(bind: Bind) -> str:
    for path in (bind.src, bind.dst):
        if ":" in path or "," in path:
            raise SpecError(
                f"bind path {path!r} holds ':' or ',', which apptainer's --bind cannot express",
                "bind a parent directory or a symlink without those characters",
            )
    return f"{bind.src}:{bind.dst}:{bind.mode}"


@dataclass(frozen=True)
class Apptainer:
    name: str = "apptainer"

    @property
    def env_prefix(self) -> str:
        return "SINGULARITYENV_" if self.name == "singularity" else "APPTAINERENV_"

    def argv(self, spec: RunSpec, program: str) -> list[str]:
        argv = [program, spec.action, "--cleanenv"]
        if spec.nv:
            argv.append("--nv")
        for bind in spec.binds:
            argv += ["--bind", _bind(bind)]
        if spec.overlay is not None:
            suffix = ":ro" if spec.overlay.readonly else ""
            argv += ["--overlay", spec.overlay.path + suffix]
        if spec.workdir is not None:
            argv += ["--pwd", spec.workdir]
        argv.append(spec.image)
        return argv + list(spec.command)

    def process_env(self, spec: RunSpec, environ: Mapping[str, str]) -> dict[str, str]:
        env = dict(environ)
        env.update({self.env_prefix + key: value for key, value in spec.env.items()})
        return env

    def image_file(self, image: str) -> str | None:
        """The local file an image reference names, or None for a remote reference."""
        return None if is_remote(image, "exec") else image
