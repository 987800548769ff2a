"""The network check's one impure part: read sysfs, /dev and the libraries, run a small NCCL
allreduce in a child process with ``NCCL_DEBUG=INFO``, and hand the facts to advice.

The allreduce runs this process's rank of the step: under ``ctrain launch`` (``ctrain exec``'s
default, or a job step) the child takes the rank, GPU and TF_CONFIG already given; otherwise it
goes through ``python -m ctrain launch --collective nccl``, which reads Slurm's variables the
same way. TensorFlow is imported only in the child.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from ctrain.checkline import Check
from ctrain.errors import CtrainError
from ctrain.launch.gpus import list_gpus
from ctrain.names import Launched
from ctrain.network import advice, nccl, rdma
from ctrain.util import proc

PROBE_TIMEOUT = 300.0
PROBE_MODULE = "ctrain.network.allreduce_probe"  # one all-reduce across every rank of the step
NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "TF_CPP_MIN_LOG_LEVEL": "1"}


def probe_argv(environ: Mapping[str, str], python: str = sys.executable) -> list[str]:
    """The child that runs the allreduce as this process's rank."""
    direct = [python, "-m", PROBE_MODULE]
    if Launched.from_env(environ) is not None:
        return direct
    return [python, "-m", "ctrain", "launch", "--collective", "nccl", "--quiet", "--", *direct]


def probe_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {**environ, **NCCL_ENV}


def run_probe(environ: Mapping[str, str], gpus: int) -> advice.NcclOutcome:
    """The allreduce run and its NCCL lines parsed; an error when it fails or hangs."""
    if gpus == 0:
        return advice.NcclOutcome(0)
    try:
        done = proc.run(probe_argv(environ), probe_env(environ), timeout=PROBE_TIMEOUT)
    except CtrainError as exc:
        return advice.NcclOutcome(gpus, (), exc.message)
    reports = nccl.parse_log((done.stdout + "\n" + done.stderr).splitlines())
    error = "" if done.returncode == 0 else proc.failure(done)
    return advice.NcclOutcome(gpus, reports, error)


def count_gpus(environ: Mapping[str, str]) -> int:
    try:
        return len(list_gpus(environ) or ())
    except CtrainError:
        return 0


def gather(
    environ: Mapping[str, str], sys_root: str = "/sys", root: str = "/", gpus: int | None = None
) -> advice.Facts:
    """Every fact of the check on this machine (``gpus`` None: asked of nvidia-smi)."""
    gpu_count = count_gpus(environ) if gpus is None else gpus
    env = {name: environ[name] for name in advice.NCCL_VARIABLES if name in environ}
    return advice.Facts(
        devices=rdma.discover(sys_root),
        seen=rdma.visibility(environ, root),
        nccl=run_probe(environ, gpu_count),
        env=env,
    )


def run_checks(environ: Mapping[str, str]) -> tuple[Check, ...]:
    """The network check's lines for this machine and this rank."""
    return advice.advise(gather(environ))
