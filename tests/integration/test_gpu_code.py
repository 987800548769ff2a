"""``ctrain doctor``'s gpu-code line and ``ctrain launch``'s warning on a Blackwell node, with this
venv's TensorFlow 2.21.

No GPU is here, so a stand-in nvidia-smi on PATH prints a recorded answer (a B200's, as nvidia-smi
prints it: tests/unit/launch/test_gpucode.py has those of a V100, an A100, an H100, a T4, two
Blackwell GPUs and old drivers). It shows which questions ctrain asks nvidia-smi and what it says
to the user from the answers; not what a real driver prints.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from tests.support.helpers import BIN, SYSTEM_PATH, run_ctrain, sandbox

pytestmark = pytest.mark.tensorflow

NVIDIA_SMI = """#!/bin/sh
case "$*" in
    "-L") echo "GPU 0: NVIDIA B200 (UUID: GPU-5a2b1c3d-0000-0000-0000-000000000000)" ;;
    "--query-gpu=index,name,compute_cap,driver_version --format=csv,noheader")
        echo "0, NVIDIA B200, 10.0, 570.124.06" ;;
    *) echo "unexpected question: $*" >&2; exit 2 ;;
esac
"""


def blackwell_node(root: Path) -> dict[str, str]:
    box = sandbox(root, f"{BIN}:{SYSTEM_PATH}")
    box.add_program("nvidia-smi", NVIDIA_SMI)
    return box.env


def test_doctor_says_tensorflow_has_no_code_for_blackwell(tmp_path: Path) -> None:
    tf = importlib.metadata.version("tensorflow")
    done = run_ctrain("doctor", "--json", env=blackwell_node(tmp_path), timeout=300)
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["gpus"]["status"] == "PASS" and "NVIDIA B200" in checks["gpus"]["detail"]
    code = checks["gpu-code"]
    assert code["status"] == "FAIL", code
    assert code["detail"].startswith(
        f"NVIDIA B200 (compute capability 10.0): TensorFlow {tf} has no code for it"
    )
    assert code["detail"].endswith("; driver 570.124.06 (CUDA 12.5.1 in full)")
    assert "nvcr.io/nvidia/tensorflow:25.02-tf2-py3" in code["fix"]
    assert done.returncode == 1


def test_launch_warns_in_one_line_and_runs_the_command(tmp_path: Path) -> None:
    env = {**blackwell_node(tmp_path), "CUDA_VISIBLE_DEVICES": "0"}
    done = run_ctrain("launch", "--", "sh", "-c", "echo ran", env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("ctrain: warning:")]
    assert len(warnings) == 1, done.stderr
    assert "NVIDIA B200 (compute capability 10.0): TensorFlow" in warnings[0]
    assert (
        " Fix: use an image whose TensorFlow was built for compute capability 10.0" in (warnings[0])
    )
