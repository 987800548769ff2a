"""Docker (and, through ``container/podman.py``, Podman): pure argv and environment builders.

Containers run with the host's network and IPC namespaces (MPI, NCCL and gRPC between ranks),
``--init`` so signals reach the command, as the calling user so files written to binds are
theirs, in the working directory asked for (--cwd), else in ctrain's own, bound at the same
path, and only the chosen variables passed
(``-e NAME``, the value read from the client's environment, so no value is ever mangled).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from ctrain.container.spec import Bind, RunSpec
from ctrain.errors import SpecError
from ctrain.references import ENGINE_SCHEME
from ctrain.releases import RuntimeVersion


def mount(bind: Bind) -> str:
    """``--mount`` value; CSV-quoted, so commas, quotes and newlines in paths survive."""
    fields = ["type=bind", f"source={bind.src}", f"target={bind.dst}"]
    if bind.mode == "ro":
        fields.append("readonly")
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(fields)
    return out.getvalue().removesuffix("\n")


def container_gpus(spec: RunSpec) -> str | None:
    """Inside a container given ``--gpus device=2,3`` the GPUs are numbered 0 and 1 again."""
    if not spec.nv or not spec.gpus or not all(g.isdigit() for g in spec.gpus):
        return None
    return ",".join(str(i) for i in range(len(spec.gpus)))


def strip_scheme(image: str) -> str:
    return image.removeprefix(f"{ENGINE_SCHEME}://")


def wanted_gpus(spec: RunSpec) -> tuple[str, ...] | None:
    """The GPUs a ``--nv`` run gets: None for every GPU (the task's set is unknown), else the
    task's own; a task that sees none cannot ask for GPUs."""
    if spec.gpus is not None and not spec.gpus:
        raise SpecError("--nv but this task sees no GPU", "ask Slurm for GPUs or drop --nv")
    return spec.gpus


@dataclass(frozen=True)
class Docker:
    name: str = "docker"
    # the launcher is carried in: a read-only bind onto a path the image lacks (made for it)
    carries_launcher: ClassVar[bool] = True

    def _gpus(self, spec: RunSpec) -> list[str]:
        if not spec.nv:
            return []
        gpus = wanted_gpus(spec)
        return ["--gpus", "all" if gpus is None else f'"device={",".join(gpus)}"']

    def _identity(self, spec: RunSpec) -> list[str]:
        """Who the command runs as: the caller's uid and gid."""
        return [] if spec.user is None else ["--user", f"{spec.user[0]}:{spec.user[1]}"]

    def argv(self, spec: RunSpec, program: str) -> list[str]:
        if spec.overlay is not None:
            raise SpecError(
                f"--overlay needs apptainer or singularity; {self.name} cannot mount one",
                "bind a directory instead (-B SRC:DST) or use --runtime apptainer",
            )
        argv = [program, "run", "--rm", "--init", "--network", "host", "--ipc", "host"]
        argv += ["-it"] if spec.tty else ["-i"] if spec.action == "shell" else []
        argv += self._identity(spec)
        argv += self._gpus(spec)
        binds = list(spec.binds)
        unbound = spec.cwd != "/" and not any(b.dst == spec.cwd for b in binds)
        if spec.workdir is None and unbound:
            binds.append(Bind(spec.cwd, spec.cwd))
        argv += ["--workdir", spec.workdir or spec.cwd]
        for bind in binds:
            argv += ["--mount", mount(bind)]
        for key in sorted(spec.env):
            if not (key == "CUDA_VISIBLE_DEVICES" and container_gpus(spec) is not None):
                argv += ["-e", key]
        remapped = container_gpus(spec)
        if remapped is not None:
            argv += ["-e", f"CUDA_VISIBLE_DEVICES={remapped}"]
        image = strip_scheme(spec.image)
        if spec.action == "exec":
            return [*argv, "--entrypoint", spec.command[0], image, *spec.command[1:]]
        if spec.action == "shell":
            return [*argv, "--entrypoint", "/bin/bash", image]
        return [*argv, image, *spec.command]

    def process_env(self, spec: RunSpec, environ: Mapping[str, str]) -> dict[str, str]:
        return {**environ, **spec.env}

    def probed(self, program: str, version_of: Callable[[str], RuntimeVersion]) -> Docker:
        return self

    def notes(self, spec: RunSpec) -> list[str]:
        return []

    def image_file(self, image: str) -> str | None:
        return None
