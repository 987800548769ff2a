"""Data-parallel scaling: 2 workers against 1, both modes, through ctrain and launched by hand.

Every configuration runs the same benchmark command (`python -m ctrain.bench.synthetic`,
MobileNetV2 64x64, batch 32 per worker, one thread per worker) at 1 and then 2 workers:

  ctrain  `ctrain bench --mode M --workers 1,2 --threads 1`, that is
          `srun -n N [--mpi=pmix] ctrain launch --mode M -- python -m ctrain.bench.synthetic`:
          ctrain launch's defaults (launch/tuning.py) apply where the run has not set them
  hand    the same command started the way a user does without ctrain launch: plain
          `srun -n N python ...` (the script's ctrain.distributed.init() builds TF_CONFIG from
          Slurm's variables, as a hand-written one would) and `srun --mpi=pmix -n N python ...`
          for Horovod; none of ctrain launch's defaults

The repetitions are interleaved: each one runs the four (mode, how) pairs, the order reversed
every other repetition, and 1 and 2 workers back to back in each, so load on the machine moves
both counts of a pair. Per repetition the speed-up is 2 workers over 1 of the same pair, and
ctrain over hand is the ratio of their 2-worker rates; the table gives medians and ranges.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import BENCH_MODEL, CTRAIN, PYTHON, REPO, clean_env, median, run, say

from ctrain.bench.core import BenchOptions, benchmark_command

MODES = ("multiworker", "horovod")
HOWS = ("ctrain", "hand")
WORKERS = (1, 2)
NAMES = {"ctrain": "`srun ctrain launch`", "hand": "by hand, `srun python`"}


def options(steps: int) -> BenchOptions:
    """The benchmark of every run; ``ctrain bench`` gets the same as flags."""
    return BenchOptions(
        workers=WORKERS, model="MobileNetV2", batch=32, image_size=64, steps=steps, iters=5,
        warmup=3, threads=1, timeout=600,
    )  # fmt: skip


def ctrain_bench_argv(mode: str, steps: int, out: Path) -> list[str]:
    o = options(steps)
    return [
        CTRAIN, "bench", "--mode", mode, "--workers", "1,2", *BENCH_MODEL, "--threads", "1",
        "--warmup", str(o.warmup), "--steps", str(o.steps), "--iters", str(o.iters),
        "--timeout", str(int(o.timeout)), "--out", str(out),
    ]  # fmt: skip


def hand_argv(mode: str, workers: int, steps: int, report: Path) -> list[str]:
    mpi = ["--mpi=pmix"] if mode == "horovod" else []
    command = benchmark_command(PYTHON, None, options(steps), str(report))
    return ["srun", "-n", str(workers), "--kill-on-bad-exit=1", "-t", "10", *mpi, *command]


def run_ctrain(mode: str, steps: int, out: Path) -> tuple[dict[int, float], list[Any]]:
    """Both worker counts through ``ctrain bench``: total images/s by count, and its runs."""
    argv = ctrain_bench_argv(mode, steps, out)
    done = subprocess.run(
        argv, env=clean_env(threads=None), cwd=REPO, timeout=1300, stdout=sys.stderr
    )
    if done.returncode != 0:
        raise RuntimeError(f"ctrain bench exited {done.returncode}; see {out / 'logs'}")
    runs = json.loads((out / "bench.json").read_text())["runs"]
    return {int(r["workers"]): float(r["total"]) for r in runs}, runs


def run_hand(mode: str, steps: int, work: Path, rep: int) -> dict[int, float]:
    """Both worker counts launched by hand: total images/s by count."""
    rates = {}
    for workers in WORKERS:
        report = work / f"scaling-hand-{mode}-w{workers}"
        for stale in report.glob("rank*.json"):
            stale.unlink()
        env = clean_env(threads=1, CTRAIN_MODE=mode)  # the API's mode, as a user would export
        log = work / f"scaling-hand-{mode}-w{workers}-{rep}.log"
        run(hand_argv(mode, workers, steps, report), env, timeout=900, log=log)
        rates[workers] = float(json.loads((report / "rank0.json").read_text())["total_mean"])
    return rates


def scaling(out: Path, steps: int, reps: int = 5, hows: Sequence[str] = HOWS) -> dict[str, Any]:
    """Every (mode, how) pair at 1 and 2 workers, ``reps`` times, interleaved."""
    pairs = [(mode, how) for mode in MODES for how in hows]
    rates: dict[str, dict[str, list[float]]] = {
        f"{m}/{h}": {str(w): [] for w in WORKERS} for m, h in pairs
    }
    failures: dict[str, str] = {}
    modes: dict[str, Any] = {}
    work = out / "work"
    for rep in range(reps):
        for mode, how in pairs[:: -1 if rep % 2 else 1]:
            key = f"{mode}/{how}"
            if key in failures:
                continue
            say(f"scaling {rep + 1}/{reps}: {mode}, {how}, 1 and 2 workers")
            try:
                if how == "ctrain":
                    found, runs = run_ctrain(mode, steps, out / f"scaling-{mode}")
                    modes[mode] = {"runs": runs, "dir": str(out / f"scaling-{mode}")}
                else:
                    found = run_hand(mode, steps, work, rep)
            except (RuntimeError, OSError, KeyError, ValueError, subprocess.SubprocessError) as exc:
                failures[key] = str(exc)
                continue
            for workers, rate in found.items():
                rates[key][str(workers)].append(rate)
    return {"rates": rates, "failures": failures, "reps": reps, "steps": steps, "modes": modes}


def spread(values: Sequence[float], digits: int = 2) -> str:
    """``median (min - max)``, or "-" when there is nothing."""
    if not values:
        return "-"
    return f"{median(values):.{digits}f} ({min(values):.{digits}f} - {max(values):.{digits}f})"


def speedups(found: dict[str, list[float]]) -> list[float]:
    """2 workers over 1 in each repetition."""
    return [two / one for one, two in zip(found["1"], found["2"], strict=False) if one > 0]


def scaling_table(section: dict[str, Any]) -> str:
    rates, failures = section["rates"], section["failures"]
    lines = [
        "Data-parallel efficiency, 2 workers against 1, one thread each (MobileNetV2 64x64, "
        f"batch 32 per worker, synthetic data); {section['reps']} interleaved repetitions, "
        "median (min - max) over them:",
        "",
        "| mode | how | 1 worker, img/s | 2 workers, img/s | speed-up | scaling efficiency "
        "| 2 workers, ctrain / hand | n |",
        "|:--|:--|--:|--:|--:|--:|--:|--:|",
    ]
    for key, found in rates.items():
        mode, how = key.split("/")
        if key in failures:
            lines.append(f"| {mode} | {NAMES[how]} | failed: {failures[key]} | | | | | |")
            continue
        ups = speedups(found)
        efficiency = f"{median([u / 2 for u in ups]):.0%}" if ups else "-"
        versus = ""
        if how == "hand" and f"{mode}/ctrain" in rates:
            mine = rates[f"{mode}/ctrain"]["2"]
            versus = spread([c / h for c, h in zip(mine, found["2"], strict=False) if h > 0])
        lines.append(
            f"| {mode} | {NAMES[how]} | {spread(found['1'], 1)} | {spread(found['2'], 1)} | "
            f"{spread(ups)} | {efficiency} | {versus} | {len(ups)} |"
        )
    return "\n".join(lines)
