"""Helpers for the real multi-process tests: a clean job environment and bounded runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TRAIN = SCRIPTS / "train_tiny.py"
BIN = Path(sys.executable).parent
LAUNCHER_PREFIXES = ("SLURM_", "SLURMD_", "OMPI_", "PMI_", "PMIX_", "HOROVOD_", "CTRAIN_")
# `ctrain bench` options for a run of seconds: a small model, images and batch, few steps
TINY = ["--model", "MobileNetV2", "--image-size", "32", "--batch", "8", "--steps", "6",
        "--iters", "3", "--warmup", "2", "--threads", "1", "--timeout", "300"]  # fmt: skip


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables, the venv first on PATH, one thread
    per process (2 cores), and OpenMPI kept on the loopback interface."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "OMP_NUM_THREADS": "1",
            "TF_NUM_INTRAOP_THREADS": "1",
            "TF_NUM_INTEROP_THREADS": "1",
            "OMPI_MCA_oob_tcp_if_include": "lo",
            "OMPI_MCA_btl_tcp_if_include": "lo",
            "OMPI_MCA_btl": "self,vader,tcp",
        }
    )
    env.update(extra)
    return env


def run(
    argv: Sequence[str], env: dict[str, str], timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run to completion within ``timeout``; a failure shows the command's output."""
    done = subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def reports(out: Path, size: int) -> list[dict[str, object]]:
    """The per-rank reports train_tiny.py wrote, by rank."""
    found = [json.loads((out / f"rank{r}.json").read_text()) for r in range(size)]
    assert [r["rank"] for r in found] == list(range(size))
    return found


def train(out: Path, epochs: int = 3) -> list[str]:
    return [str(BIN / "python"), str(TRAIN), str(out), str(epochs)]
