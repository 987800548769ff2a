"""The GPUs this process can see (``nvidia-smi -L``), and what they and the driver are
(``nvidia-smi --query-gpu``, judged in launch/gpucode.py): nvidia-smi is asked here only."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import NamedTuple

from ctrain import matrix
from ctrain.checkline import Check
from ctrain.launch.gpucode import QUERY, QUERY_OLD, GpuAnswer, judge, parse_query
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


def query_gpus(environ: Mapping[str, str]) -> tuple[GpuAnswer, ...] | None:
    """Each GPU's name, compute capability and driver; None when nvidia-smi is missing or fails."""
    path = proc.which("nvidia-smi", environ)
    if path is None:
        return None
    for query in (QUERY, QUERY_OLD):  # a driver before 510 refuses compute_cap
        done = proc.run([path, *query], environ, timeout=NVIDIA_SMI_TIMEOUT)
        if done.returncode == 0:
            return parse_query(done.stdout)
    return None


def installed_tensorflow() -> tuple[str | None, matrix.GpuCode | None]:
    """The TensorFlow this Python would import (its distribution's version, without importing
    it) and, where the matrix has it, its GPU code."""
    import importlib.metadata  # here: a rank's start imports it only with GPUs (~40 ms)

    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            tf = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        try:
            return tf, matrix.find(matrix.load(), tf).gpu_code
        except matrix.MatrixError:
            return tf, None
    return None, None


def code_verdict(environ: Mapping[str, str]) -> Check:
    """This node's GPUs and driver against this Python's TensorFlow (nothing to check without
    nvidia-smi: ``ctrain doctor``'s gpus line says so)."""
    return judge(query_gpus(environ) or (), *installed_tensorflow())
