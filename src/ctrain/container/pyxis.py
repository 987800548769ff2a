"""pyxis: containers as Slurm job steps, ``srun --container-image=IMAGE ... COMMAND``.

pyxis is a plugin of Slurm's srun (SPANK), not a program: its ``--container-*`` options are
srun's, and enroot, underneath, makes the container from the image on each node of the step.
So ``ctrain exec --runtime pyxis`` starts a new step, and refuses inside one (each task would
start a step of its own). The facts relied on, with their sources, are docs/pyxis-facts.md.

What ctrain asks of pyxis, for ``exec`` and for the job scripts (slurm/jobs.py) alike:
- the image in enroot's form: ``docker://REGISTRY/REPO:TAG`` becomes ``REGISTRY#REPO:TAG``,
  ``docker-daemon://NAME:TAG`` becomes ``dockerd://NAME:TAG``, a squashfs file an absolute path
  (pyxis takes a reference starting with neither ``.`` nor ``/`` for a registry image);
- the mounts ``SRC:DST[:ro]``, joined by commas (paths holding ``,`` or ``:`` are refused);
- the working directory: the one asked for, else ctrain's own, mounted at the same path (the
  container would otherwise start in the image's directory, as apptainer does not);
- ``--container-env`` naming the variables whose host value must win over the image's (pyxis
  sets every exported host variable, but the image's value of a name comes first);
- ``--no-container-mount-home``: the home directory stays out, as ``~/.local`` does
  (PYTHONNOUSERSITE). Neither ``--container-writable`` nor ``--container-remap-root``: ctrain
  writes only to mounts and TMPDIR, as the calling user.
GPUs are the step's: enroot's NVIDIA hook gives the container the devices of
NVIDIA_VISIBLE_DEVICES, and ``ctrain launch`` inside pins each rank as on any runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from ctrain.container.spec import ALWAYS, Bind, RunSpec
from ctrain.errors import SpecError
from ctrain.launch.jobenv import SlurmEnv
from ctrain.names import PYXIS
from ctrain.references import enroot_image, is_file_reference, split_reference
from ctrain.releases import RuntimeVersion

IMAGE = "--container-image"
MOUNTS = "--container-mounts"
WORKDIR = "--container-workdir"
ENV = "--container-env"
NO_HOME = "--no-container-mount-home"
# The variables a job script's step keeps from the host over the image's: the GPUs Slurm gave
# the step, what the script exports for ctrain launch, and what ctrain always sets.
JOB_ENV = (
    "CTRAIN_MODE",
    "CTRAIN_RUNTIME",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    *ALWAYS,
    "TMPDIR",
)
# Set by Slurm in each task itself: naming them in --container-env would change nothing.
_TASK_OWN = ("SLURM_", "SLURMD_", "PMI_", "PMIX_", "OMPI_")


def _path(path: str) -> str:
    if "," in path or ":" in path:
        raise SpecError(
            f"mount path {path!r} holds ',' or ':', which pyxis' --container-mounts cannot express",
            "mount a parent directory or a symlink without those characters",
        )
    return path


def mounts_value(binds: Iterable[Bind]) -> str:
    """``SRC:DST[:ro]`` entries joined by commas."""
    entries = [f"{_path(b.src)}:{_path(b.dst)}" + (":ro" if b.mode == "ro" else "") for b in binds]
    return ",".join(entries)


def env_names(env: Mapping[str, str]) -> list[str]:
    """The names of ``env`` a task does not get from Slurm itself, sorted."""
    return sorted(name for name in env if not name.startswith(_TASK_OWN))


def container_options(
    image: str, binds: Iterable[Bind], workdir: str, names: Iterable[str]
) -> list[str]:
    """pyxis' options of one step, in one order."""
    options = [f"{IMAGE}={image}"]
    mounts = mounts_value(binds)
    if mounts:
        options.append(f"{MOUNTS}={mounts}")
    options.append(f"{WORKDIR}={workdir}")
    listed = ",".join(names)
    if listed:
        options.append(f"{ENV}={listed}")
    return [*options, NO_HOME]


@dataclass(frozen=True)
class Pyxis:
    name: str = PYXIS
    # the launcher is carried in: --container-mounts with `ro`, whose destination enroot creates
    carries_launcher: ClassVar[bool] = True

    def argv(self, spec: RunSpec, program: str) -> list[str]:
        if spec.action == "run":
            raise SpecError("pyxis has no runscript to run", "use ctrain exec IMAGE -- CMD")
        if spec.overlay is not None:
            raise SpecError("--overlay needs apptainer or singularity", "drop --overlay")
        binds = spec.binds
        workdir = spec.workdir or spec.cwd
        if spec.workdir is None and spec.cwd != "/" and not any(b.dst == workdir for b in binds):
            binds = (*binds, Bind(spec.cwd, spec.cwd))
        image = enroot_image(spec.image, spec.cwd)
        options = container_options(image, binds, workdir, env_names(spec.env))
        if spec.action == "shell":
            return [program, "--pty", *options, *(spec.command or ("/bin/bash",))]
        return [program, *options, *spec.command]

    def process_env(self, spec: RunSpec, environ: Mapping[str, str]) -> dict[str, str]:
        """srun passes its environment to the tasks; pyxis keeps the host's value of the names
        in --container-env."""
        slurm = SlurmEnv.from_environ(environ)
        if slurm.in_step:
            raise SpecError(
                f"--runtime pyxis starts an srun step, and this is already task "
                f"{environ.get('SLURM_PROCID', '?')} of step {slurm.step_id}",
                "run ctrain exec --runtime pyxis once in the batch script or salloc shell, "
                "not under srun (or use ctrain job render --runtime pyxis)",
            )
        return {**environ, **spec.env}

    def probed(self, program: str, version_of: Callable[[str], RuntimeVersion]) -> Pyxis:
        return self

    def notes(self, spec: RunSpec) -> list[str]:
        lines = [
            "pyxis: a new srun step; enroot makes the container on each node, "
            "in the places the site's enroot.conf names (pyxis does not pass the job's "
            "ENROOT_CACHE_PATH, ENROOT_DATA_PATH, ENROOT_RUNTIME_PATH)"
        ]
        image = enroot_image(spec.image, spec.cwd)
        if image != spec.image:
            lines.append(f"image {spec.image} given as {image}, enroot's form")
        if spec.nv:
            lines.append("--nv: the GPUs of the step, through enroot's NVIDIA hook")
        return lines

    def image_file(self, image: str) -> str | None:
        """The squashfs file an image names, or None for a registry image."""
        if split_reference(image) is not None or ("#" in image and not is_file_reference(image)):
            return None
        return image
