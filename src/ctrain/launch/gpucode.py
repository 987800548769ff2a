"""Whether this node's GPUs and driver can run the TensorFlow at hand, said before a GPU is used.

Each GPU's compute capability is held against the GPU code of TensorFlow's wheel (the matrix's
``gpu_code``, read from the wheel with cuobjdump): machine code (SASS) for the GPU's major
generation at or below its minor runs as it is; else only the driver's JIT of the PTX can run
it, which needs a driver that has the wheel's CUDA in full, and which users report failing beyond
``gpu_code.newest`` (Blackwell under TensorFlow 2.21). The driver is held against CUDA
12's floor (minor-version compatibility). nvidia-smi's CSV answer comes in as text; nothing here
runs a process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from ctrain.checkline import Check, Status, rank
from ctrain.matrix import GpuCode

# The name of the check line ``judge`` returns (``ctrain doctor``'s gpu-code line).
NAME = "gpu-code"

# nvidia-smi's arguments for the answer ``parse_query`` reads; compute_cap needs a driver >= 510.
QUERY = ("--query-gpu=index,name,compute_cap,driver_version", "--format=csv,noheader")
# The image that has TensorFlow code for Blackwell (CUDA 12.8; docs/images.md).
BLACKWELL_IMAGE = "nvcr.io/nvidia/tensorflow:25.02-tf2-py3"


class GpuAnswer(NamedTuple):
    """One line of nvidia-smi's answer to QUERY."""

    number: str  # nvidia-smi's index (a tuple's `index` is a method)
    name: str
    capability: str | None  # "8.0"; None where the driver does not report it
    driver: str


# What a driver before 510 answers instead: it has no compute_cap field.
QUERY_OLD = ("--query-gpu=index,name,driver_version", "--format=csv,noheader")


def parse_query(text: str) -> tuple[GpuAnswer, ...]:
    """nvidia-smi's CSV lines for QUERY ("0, NVIDIA A100-SXM4-80GB, 8.0, 550.54.15") or QUERY_OLD
    ("0, Tesla K80, 470.82.01") as GpuAnswers."""
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) not in (3, 4) or not fields[0].isdigit():
            continue
        capability = fields[2] if len(fields) == 4 else ""
        known = capability if capability.replace(".", "").isdigit() else None
        gpus.append(GpuAnswer(fields[0], fields[1], known, fields[-1]))
    return tuple(gpus)


def version(text: str) -> tuple[int, ...]:
    """ "555.42.06" -> (555, 42, 6); what is not a number ends it."""
    parts = []
    for part in text.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def _verdict(status: Status, detail: str, fix: str = "") -> Check:
    """Whether TensorFlow's GPU code runs on this node's GPUs and driver: the gpu-code line."""
    return Check(NAME, status, detail, fix)


def _gpu_verdict(name: str, capability: str, driver: str, tf: str, code: GpuCode) -> Check:
    """One kind of GPU against TensorFlow ``tf``'s code."""
    cc = version(capability)
    said = f"{name} (compute capability {capability})"
    native = [s for s in code.sass if version(s)[0] == cc[0] and version(s) <= cc]
    if native:
        return _verdict("PASS", f"{said}: sm_{native[-1].replace('.', '')} code in TensorFlow {tf}")
    holds = f"its wheel holds code for {', '.join(code.sass)} and PTX for {code.ptx}"
    if cc > version(code.newest):
        return _verdict(
            "FAIL",
            f"{said}: TensorFlow {tf} has no code for it ({holds}; users report it failing "
            f"on anything newer than {code.newest})",
            f"use an image whose TensorFlow was built for compute capability {capability}"
            + (f", such as NVIDIA's {BLACKWELL_IMAGE}" if cc[0] in (10, 12) else ""),
        )
    if cc < version(code.ptx):
        return _verdict(
            "FAIL",
            f"{said}: TensorFlow {tf} has no code for it ({holds})",
            f"use GPUs of compute capability {code.sass[0]} or newer, or an older TensorFlow",
        )
    if version(driver) < version(code.driver):
        return _verdict(
            "FAIL",
            f"{said}: TensorFlow {tf} runs on it only through the JIT of its PTX for {code.ptx}, "
            f"which needs driver >= {code.driver} (CUDA {code.cuda}); this node has {driver}",
            f"ask the site for driver >= {code.driver}, or use GPUs with code in the wheel",
        )
    return _verdict(
        "WARN",
        f"{said}: TensorFlow {tf} runs on it through the JIT of its PTX for {code.ptx}: the "
        "first run compiles every kernel (minutes)",
        "keep the JIT cache between runs (CUDA_CACHE_PATH on a shared filesystem)",
    )


def judge(gpus: Sequence[GpuAnswer], tf: str | None, code: GpuCode | None) -> Check:
    """Every GPU of the node (each kind once) and the driver, against TensorFlow ``tf``."""
    if not gpus:
        return _verdict("PASS", "no GPU: nothing to check")
    driver = gpus[0].driver
    if version(driver) < version(code.cuda12_driver if code else "525.60.13"):
        floor = code.cuda12_driver if code else "525.60.13"
        return _verdict(
            "FAIL",
            f"driver {driver} is older than CUDA 12 code needs (>= {floor})",
            f"ask the site for driver >= {floor}, or use an image built for this driver's CUDA",
        )
    if tf is None or code is None:
        named = "no TensorFlow" if tf is None else f"TensorFlow {tf}, not in ctrain's matrix"
        return _verdict("WARN", f"driver {driver}; {named}: its GPU code is not known here")
    kinds = dict.fromkeys((gpu.name, gpu.capability) for gpu in gpus)
    verdicts = []
    for name, capability in kinds:
        if capability is None:
            verdicts.append(
                _verdict("WARN", f"{name}: compute capability not reported (driver before 510)")
            )
        else:
            verdicts.append(_gpu_verdict(name, capability, driver, tf, code))
    worst = max(verdicts, key=lambda v: rank(v.status))  # the first of the worst
    full = version(driver) >= version(code.driver)
    how = "in full" if full else "by minor-version compatibility"
    count = f"{len(gpus)} GPU(s): " if len(gpus) > 1 else ""
    return replace(worst, detail=f"{count}{worst.detail}; driver {driver} (CUDA {code.cuda} {how})")
