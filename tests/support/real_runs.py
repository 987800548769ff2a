"""Helpers for the real multi-process tests: a clean job environment, bounded runs, and the
checks of `ctrain bench`'s outputs."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support import scratch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"  # tests/scripts
TRAIN = SCRIPTS / "train_tiny.py"
BIN = Path(sys.executable).parent
LAUNCHER_PREFIXES = ("SLURM_", "SLURMD_", "OMPI_", "PMI_", "PMIX_", "HOROVOD_", "CTRAIN_")
# `ctrain bench` options for a run of seconds: a small model, images and batch, few steps
TINY = ["--model", "MobileNetV2", "--image-size", "32", "--batch", "8", "--steps", "6",
        "--iters", "3", "--warmup", "2", "--threads", "1", "--timeout", "300"]  # fmt: skip


@functools.cache
def state_home() -> Path:
    """The run's XDG_STATE_HOME: `ctrain job submit`'s ledger of jobs, not the user's."""
    directory = scratch.make("state")
    atexit.register(shutil.rmtree, directory, True)
    return directory


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any launcher's variables, the venv first on PATH, one thread
    per process (2 cores), OpenMPI kept on the loopback interface, the run's own ledger."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
            "XDG_STATE_HOME": str(state_home()),
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


def check_outputs(out: Path, modes: list[str]) -> dict[str, object]:
    """`ctrain bench --workers 1,2` in ``modes`` under srun, as its outputs in ``out`` show it:
    the JSON (returned), the Markdown table, the PNG plot and the 2-worker run's log."""
    data: dict[str, object] = json.loads((out / "bench.json").read_text())
    runs = data["runs"]
    scaling = data["scaling"]
    assert isinstance(runs, list) and isinstance(scaling, list)
    assert [r["workers"] for r in runs] == [1, 2]
    assert [r["mode"] for r in runs] == modes
    assert all(r["total"] > 0 and r["per_worker"] > 0 for r in runs)
    assert len(runs[1]["peak_rss_mb"]) == 2  # both ranks reported
    assert scaling[0]["speedup"] == 1.0 and scaling[0]["efficiency"] == 1.0
    two = scaling[1]
    assert two["speedup"] == pytest.approx(runs[1]["total"] / runs[0]["total"])
    assert two["efficiency"] == pytest.approx(two["speedup"] / 2)
    table = (out / "bench.md").read_text()
    assert "| workers | mode | images/s (total) |" in table
    assert f"| 2 | {modes[1]} | {runs[1]['total']:.1f} |" in table
    png = (out / "speedup.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert (out / "logs" / "w2.log").read_text().startswith("$ srun -n 2 ")
    return data
