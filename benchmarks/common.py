"""What the benchmarks share: paths, a clean environment, bounded runs, small statistics."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PYTHON = str(BIN / "python")
CTRAIN = str(BIN / "ctrain")
EXAMPLES = REPO / "examples"
SYNTHETIC = ["-m", "ctrain.bench.synthetic"]  # after PYTHON: the benchmark ctrain ships
TRANSFER = str(EXAMPLES / "resnet50_transfer.py")
LAUNCHER_PREFIXES = ("SLURM_", "SLURMD_", "OMPI_", "PMI_", "PMIX_", "HOROVOD_", "CTRAIN_")

# One configuration for launch overhead, scaling and memory: small enough for 2 shared cores.
MODEL = ["--model", "MobileNetV2", "--image-size", "64", "--batch-size", "32", "--classes", "10"]
BENCH_MODEL = ["--model", "MobileNetV2", "--image-size", "64", "--batch", "32"]
T0 = time.monotonic()


def say(text: str) -> None:
    print(f"[bench {time.monotonic() - T0:5.0f}s] {text}", file=sys.stderr, flush=True)


def clean_env(threads: int | None = 1, **extra: str) -> dict[str, str]:
    """No launcher variables inherited, the venv first on PATH, OpenMPI on the loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_PREFIXES)}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        OMPI_MCA_oob_tcp_if_include="lo",
        OMPI_MCA_btl_tcp_if_include="lo",
        OMPI_MCA_btl="self,vader,tcp",
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    if threads:
        for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
            env[name] = str(threads)
    env.update(extra)
    return env


def run(
    argv: Sequence[str], env: dict[str, str], timeout: float = 600, log: Path | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        list(argv), env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(argv)}\n{done.stdout}\n{done.stderr}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"{argv[0]} ... exited {done.returncode}: " + " | ".join(tail))
    return done


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread_ms(values: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, min and max of ``values`` (milliseconds), as the tables show them."""
    q1, _, q3 = statistics.quantiles(values, n=4)
    return {
        "median_ms": median(values),
        "q1_ms": q1,
        "q3_ms": q3,
        "min_ms": min(values),
        "max_ms": max(values),
    }


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def first_step(
    argv: Sequence[str], env: dict[str, str], report: Path, log: Path
) -> tuple[float, float]:
    """Seconds from starting ``argv`` to its Python starting, and to the end of its first
    training step (the script reports both wall-clock times)."""
    for stale in report.glob("rank*.json"):
        stale.unlink()
    start = time.time()
    run(argv, env, timeout=600, log=log)
    data = json.loads((report / "rank0.json").read_text())
    return float(data["started_at"]) - start, float(data["first_step_at"]) - start
