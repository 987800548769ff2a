"""Collectives: what one step's gradient all-reduce costs, alone, per mode (issue 46).

Every run is `srun -n 2 [--mpi=pmix] ctrain launch --mode M -- python
benchmarks/scripts/allreduce_timed.py` on the local Slurm, one thread per rank: 2 ranks
all-reduce tensors of MobileNetV2's gradient shapes (the scaling section's model) in one call,
40 times after 5 untimed, then one float the same way. Per run: the median wall time of a call
on rank 0, the CPU time each rank spent per call (all its threads: the copies, the transport,
the reduction), and the one-float call's median wall time (the collective's latency). The
modes alternate within each repetition, the order turned every other repetition.

  multiworker  TensorFlow's MultiWorkerMirroredStrategy, ring over gRPC on the loopback (the
               only collective TensorFlow has for CPUs), as ctrain makes it (ring, its
               collective timeout)
  own          the same strategy as a script makes it itself, `MultiWorkerMirroredStrategy()`
               with TensorFlow's defaults, under `ctrain launch`
  horovod      Horovod's grouped allreduce over Open MPI (shared memory on one node)

On a CPU-only node both ranks' cores also run the training, so the CPU time per call is what
the exchange takes from the compute every step: the ceiling of 2 workers against 2 independent
processes (the scaling section) is at most compute / (compute + that).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common import CTRAIN, PYTHON, REPO, clean_env, median, run, say
from scaling import spread

from ctrain.bench.core import launch_argv

SCRIPT = REPO / "benchmarks" / "scripts" / "allreduce_timed.py"
MODES = ("multiworker", "own", "horovod")  # own: multiworker, the script's own strategy


def one_run(mode: str, work: Path, rep: int) -> dict[str, float]:
    """Rank 0's median call and one-float call (ms), and the ranks' mean CPU ms per call."""
    report = work / f"collectives-{mode}"
    for stale in report.glob("rank*.json"):
        stale.unlink()
    command = [PYTHON, str(SCRIPT), "--report", str(report), *(["--own"] if mode == "own" else [])]
    launched = "multiworker" if mode == "own" else mode
    argv = launch_argv("srun", launched, 2, CTRAIN, command, ["-t", "10"])
    run(argv, clean_env(threads=1), timeout=600, log=work / f"collectives-{mode}-{rep}.log")
    ranks = [json.loads((report / f"rank{r}.json").read_text()) for r in (0, 1)]
    return {
        "mb": ranks[0]["bytes"] / 1e6,
        "tensors": ranks[0]["tensors"],
        "wall_ms": median(ranks[0]["wall_ms"]),
        "cpu_ms": sum(r["cpu_ms_per_call"] for r in ranks) / len(ranks),
        "tiny_ms": median(ranks[0]["tiny_wall_ms"]),
    }


def collectives(work: Path, reps: int) -> dict[str, Any]:
    found: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    failures: dict[str, str] = {}
    for rep in range(reps):
        for mode in MODES[:: -1 if rep % 2 else 1]:
            if mode in failures:
                continue
            say(f"collectives {rep + 1}/{reps}: {mode}")
            try:
                found[mode].append(one_run(mode, work, rep))
            except (RuntimeError, OSError, KeyError, ValueError) as exc:
                failures[mode] = str(exc)
    return {"runs": found, "failures": failures, "reps": reps}


def collectives_table(section: dict[str, Any]) -> str:
    lines = [
        "One step's gradients all-reduced alone by 2 ranks of one thread (MobileNetV2 64x64, "
        f"1000 classes), {section['reps']} interleaved repetitions of 40 calls, median (min - max) "
        "over the repetitions:",
        "",
        "| mode | tensors | MB | wall ms per call | CPU ms per call, per rank | MB/s "
        "| one float, wall ms | n |",
        "|:--|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for mode, runs in section["runs"].items():
        if mode in section["failures"]:
            lines.append(f"| {mode} | failed: {section['failures'][mode]} | | | | | | |")
            continue
        if not runs:
            continue
        mb = runs[0]["mb"]
        rates = [mb / (r["wall_ms"] / 1000) for r in runs]
        lines.append(
            f"| {mode} | {runs[0]['tensors']:.0f} | {mb:.1f} | "
            f"{spread([r['wall_ms'] for r in runs], 1)} | {spread([r['cpu_ms'] for r in runs], 1)} "
            f"| {spread(rates, 0)} | {spread([r['tiny_ms'] for r in runs], 2)} | {len(runs)} |"
        )
    return "\n".join(lines)
