"""GPU pinning from the GPU variables Slurm itself sets.

scripts/services.sh declares 4 GPUs to Slurm as generic resources (device files only, on
machines without GPUs), so Slurm allocates them and sets CUDA_VISIBLE_DEVICES, SLURM_STEP_GPUS
and GPU_DEVICE_ORDINAL per step as on a GPU cluster. Nothing computes on them here.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN, wait_for
from tests.support.real_runs import clean_env, run

pytestmark = pytest.mark.slurm


def plans(tmp_path: Path, tasks: int, *srun_args: str) -> list[dict[str, object]]:
    run(
        [
            "srun",
            "-n",
            str(tasks),
            "-t",
            "2",
            *srun_args,
            "--output",
            f"{tmp_path}/plan-%t.json",
            CTRAIN,
            "launch",
            "--explain",
            "--json",
        ],
        clean_env(),
        timeout=120,
    )
    return [json.loads((tmp_path / f"plan-{t}.json").read_text()) for t in range(tasks)]


def test_one_gpu_per_task(tmp_path: Path) -> None:
    found = plans(tmp_path, 2, "--gpus-per-task=1")
    assert [p["gpus"] for p in found] == [["0"], ["1"]]
    assert all(p["mode"] == "multiworker" and p["collective"] == "nccl" for p in found)
    assert [p["env"]["set"]["CUDA_VISIBLE_DEVICES"] for p in found] == ["0", "1"]  # type: ignore[index]


def test_shared_gpus_pinned_by_local_rank(tmp_path: Path) -> None:
    found = plans(tmp_path, 2, "--gres=gpu:2")
    assert [p["gpus"] for p in found] == [["0"], ["1"]]


def test_one_task_with_two_gpus_is_mirrored(tmp_path: Path) -> None:
    (plan,) = plans(tmp_path, 1, "--gres=gpu:2")
    assert plan["mode"] == "mirrored"
    assert plan["gpus"] == ["0", "1"]


def holder_step_runs() -> bool:
    steps = subprocess.run(
        ["squeue", "-h", "-s", "-o", "%j"], capture_output=True, text=True, timeout=30
    ).stdout
    return "sleep" in steps.split()


def test_gpus_other_than_the_first_ones(tmp_path: Path) -> None:
    # The holder keeps GPUs 0 and 1 until it is terminated below (or its 2-minute limit).
    holder = subprocess.Popen(
        ["srun", "-n", "1", "-t", "2", "--gres=gpu:2", "sleep", "120"], env=clean_env()
    )
    try:
        wait_for(holder_step_runs, "the holder's step to have its GPUs", timeout=30)
        found = plans(tmp_path, 2, "--gres=gpu:2")
        assert [p["gpus"] for p in found] == [["2"], ["3"]]
    finally:
        holder.terminate()
        holder.wait(timeout=60)
