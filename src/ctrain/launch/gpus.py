"""The GPUs this process can see: ``nvidia-smi -L`` parsed in one place."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from ctrain.launch.jobenv import JobEnv
from ctrain.util import proc

NVIDIA_SMI_TIMEOUT = 30.0
# "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-...)"; MIG devices are indented lines under their GPU.
_GPU_LINE = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?\s*$", re.MULTILINE)


class Gpu(NamedTuple):
    number: str  # nvidia-smi's index (a tuple's `index` is a method)
    name: str


def parse_nvidia_smi(listing: str) -> tuple[Gpu, ...]:
    """The GPUs in the output of ``nvidia-smi -L``."""
    return tuple(Gpu(m.group(1), m.group(2)) for m in _GPU_LINE.finditer(listing))


def list_gpus(environ: Mapping[str, str]) -> tuple[Gpu, ...] | None:
    """The GPUs nvidia-smi lists; None when nvidia-smi is missing or fails."""
    path = proc.which("nvidia-smi", environ)
    if path is None:
        return None
    done = proc.run([path, "-L"], environ, timeout=NVIDIA_SMI_TIMEOUT)
    return parse_nvidia_smi(done.stdout) if done.returncode == 0 else None


def visible_gpus(job: JobEnv, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The GPU indices this process can see: from the environment, else asked of nvidia-smi."""
    if job.gpus.visible is not None:
        return job.gpus.visible
    return tuple(gpu.number for gpu in list_gpus(environ) or ())
