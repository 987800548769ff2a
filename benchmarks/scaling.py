"""Data-parallel scaling: 2 workers against 1, both modes, through ctrain and launched by hand.

Every run is the same benchmark command (`python -m ctrain.bench.synthetic`, MobileNetV2 64x64,
batch 32 per worker); per repetition and mode:

  ctrain   `ctrain bench --mode M --workers 1,2 --threads 1`, that is `srun -n N [--mpi=pmix]
           ctrain launch --mode M -- python -m ctrain.bench.synthetic ... --threads 1`: 1 then
           2 workers, one thread each; ctrain launch's other defaults apply (launch/tuning.py)
  hand     the same 2-worker command started the way a user does without ctrain launch:
           plain `srun -n 2 python ...` (the script's ctrain.distributed.init() builds TF_CONFIG
           from Slurm's variables, as a hand-written one would), `srun --mpi=pmix -n 2 python
           ...` for Horovod; one thread each, none of ctrain launch's defaults. With 1 worker
           ctrain launch changes nothing here (no yield for one rank of one thread), so the
           hand launch's speed-up is over the same repetition's 1-worker run
  threads  multiworker only, 2 workers, no thread setting anywhere: ctrain launch choosing the
           threads from the allocation against plain `srun python` with TensorFlow's own pools
  ceiling  two independent 1-worker runs of the same command at once, one thread each, no
           communication at all: the most 2 workers can reach on this machine. Each 2-worker
           run's share of the ceiling is its rate over the same repetition's pair

The runs are interleaved: each repetition goes through the configurations in turn, the order
reversed every other repetition, so load on the machine moves all of them alike. Per
repetition the speed-up is 2 workers over 1, and ctrain over hand the ratio of their 2-worker
rates; the table gives medians and ranges.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from common import BENCH_MODEL, CTRAIN, PYTHON, REPO, clean_env, median, run, say

from ctrain.bench.core import BenchOptions, benchmark_command, launch_argv

WORKERS = (1, 2)
# (mode, how, threads per worker: "1", or "auto" for none set), and the worker counts run
CONFIGS: tuple[tuple[str, str, str, tuple[int, ...]], ...] = (
    ("ceiling", "pair", "1", (2,)),
    ("multiworker", "ctrain", "1", WORKERS),
    ("multiworker", "hand", "1", (2,)),
    ("multiworker", "ctrain", "auto", (2,)),
    ("multiworker", "hand", "auto", (2,)),
    ("horovod", "ctrain", "1", WORKERS),
    ("horovod", "hand", "1", (2,)),
)
NAMES = {
    "ctrain": "`srun ctrain launch`",
    "hand": "by hand, `srun python`",
    "pair": "2 independent processes at once",
}
THREADS = {"1": "1 (set)", "auto": "not set"}


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


def one_argv(how: str, mode: str, threads: str, steps: int, report: Path) -> list[str]:
    """One 2-worker run: through ctrain launch, or by hand (plain srun)."""
    command = benchmark_command(
        PYTHON, None, replace(options(steps), threads=1 if threads == "1" else 0), str(report)
    )
    if how == "ctrain":
        return launch_argv("srun", mode, 2, CTRAIN, command, ["-t", "10"])
    mpi = ["--mpi=pmix"] if mode == "horovod" else []
    return ["srun", "-n", "2", "--kill-on-bad-exit=1", "-t", "10", *mpi, *command]


def run_pair(steps: int, work: Path, rep: int) -> float:
    """The ceiling: the 1-worker benchmark twice at once, no launcher, no communication; the
    sum of the two rates."""
    reports = [work / f"scaling-pair-{side}" for side in "ab"]
    for report in reports:
        for stale in report.glob("rank*.json"):
            stale.unlink()
    env = clean_env(threads=1, CTRAIN_MODE="single")
    logs = [(work / f"scaling-pair-{side}-{rep}.log").open("w") for side in "ab"]
    try:
        command = [benchmark_command(PYTHON, None, options(steps), str(r)) for r in reports]
        started = [
            subprocess.Popen(argv, env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
            for argv, log in zip(command, logs, strict=True)
        ]
        codes = [process.wait(timeout=900) for process in started]
    finally:
        for log in logs:
            log.close()
    if any(codes):
        raise RuntimeError(f"the independent pair exited {codes}; see {work}")
    return sum(float(json.loads((r / "rank0.json").read_text())["total_mean"]) for r in reports)


def run_ctrain_bench(mode: str, steps: int, out: Path) -> tuple[dict[int, float], list[Any]]:
    """Both worker counts through ``ctrain bench``: total images/s by count, and its runs."""
    argv = ctrain_bench_argv(mode, steps, out)
    done = subprocess.run(
        argv, env=clean_env(threads=None), cwd=REPO, timeout=1300, stdout=sys.stderr
    )
    if done.returncode != 0:
        raise RuntimeError(f"ctrain bench exited {done.returncode}; see {out / 'logs'}")
    runs = json.loads((out / "bench.json").read_text())["runs"]
    return {int(r["workers"]): float(r["total"]) for r in runs}, runs


def run_one(how: str, mode: str, threads: str, steps: int, work: Path, rep: int) -> float:
    """Total images/s of one 2-worker run."""
    name = f"scaling-{how}-{mode}-{threads}"
    report = work / name
    for stale in report.glob("rank*.json"):
        stale.unlink()
    # one thread set in the environment as a user would (ctrain keeps it), or none at all;
    # CTRAIN_MODE is the API's mode when no ctrain launch hands it one
    env = clean_env(threads=1 if threads == "1" else None, CTRAIN_MODE=mode)
    run(
        one_argv(how, mode, threads, steps, report),
        env,
        timeout=900,
        log=work / f"{name}-{rep}.log",
    )
    return float(json.loads((report / "rank0.json").read_text())["total_mean"])


def scaling(out: Path, steps: int, reps: int = 5, only_ctrain: bool = False) -> dict[str, Any]:
    """Every configuration ``reps`` times, interleaved; ``only_ctrain``: ctrain bench alone."""
    configs = [c for c in CONFIGS if c[1:3] == ("ctrain", "1")] if only_ctrain else CONFIGS
    rates = {"/".join(c[:3]): {str(w): list[float]() for w in c[3]} for c in configs}
    failures: dict[str, str] = {}
    modes: dict[str, Any] = {}
    work = out / "work"
    for rep in range(reps):
        for mode, how, threads, _ in configs[:: -1 if rep % 2 else 1]:
            key = f"{mode}/{how}/{threads}"
            if key in failures:
                continue
            say(f"scaling {rep + 1}/{reps}: {mode}, {how}, threads {threads}")
            try:
                if how == "pair":
                    found = {2: run_pair(steps, work, rep)}
                elif (how, threads) == ("ctrain", "1"):
                    found, runs = run_ctrain_bench(mode, steps, out / f"scaling-{mode}")
                    modes[mode] = {"runs": runs, "dir": str(out / f"scaling-{mode}")}
                else:
                    found = {2: run_one(how, mode, threads, steps, work, rep)}
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


def speedups(ones: Sequence[float], twos: Sequence[float]) -> list[float]:
    """2 workers over 1 in each repetition."""
    return [two / one for one, two in zip(ones, twos, strict=False) if one > 0]


def shares(twos: Sequence[float], ceiling: Sequence[float]) -> list[float]:
    """Each repetition's 2-worker rate over the same repetition's independent pair."""
    return [two / top for two, top in zip(twos, ceiling, strict=False) if top > 0]


def percent(values: Sequence[float]) -> str:
    """``median % (min - max %)``, or "" when there is nothing."""
    if not values:
        return ""
    return f"{median(values):.0%} ({min(values):.0%} - {max(values):.0%})"


def scaling_table(section: dict[str, Any]) -> str:
    rates, failures = section["rates"], section["failures"]
    ceiling = rates.get("ceiling/pair/1", {}).get("2", [])
    lines = [
        "Data-parallel efficiency, 2 workers against 1 (MobileNetV2 64x64, batch 32 per "
        f"worker, synthetic data); {section['reps']} interleaved repetitions, median (min - max) "
        "over them; a hand launch's speed-up is over the 1-worker run of its repetition; the "
        "ceiling is two independent 1-worker processes at once, and each 2-worker run's share "
        "of it is over the same repetition's pair:",
        "",
        "| mode | launched | threads per worker | 1 worker, img/s | 2 workers, img/s | speed-up "
        "| scaling efficiency | share of the ceiling | 2 workers, ctrain / hand | n |",
        "|:--|:--|:--|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for key, found in rates.items():
        mode, how, threads = key.split("/")
        head = f"| {mode} | {NAMES[how]} | {THREADS[threads]} |"
        if key in failures:
            lines.append(f"{head} failed: {failures[key]} | | | | | | |")
            continue
        one = "multiworker" if how == "pair" else mode  # the pair's 1 worker: the plain runs
        base = rates.get(f"{one}/ctrain/1", {}).get("1", []) if threads == "1" else []
        ups = speedups(base, found["2"])
        efficiency = f"{median([u / 2 for u in ups]):.0%}" if ups else "-"
        versus = ""
        if how == "hand" and f"{mode}/ctrain/{threads}" in rates:
            mine = rates[f"{mode}/ctrain/{threads}"]["2"]
            versus = spread([c / h for c, h in zip(mine, found["2"], strict=False) if h > 0])
        share = "100%" if how == "pair" else percent(shares(found["2"], ceiling))
        lines.append(
            f"{head} {spread(found.get('1', []), 1)} | {spread(found['2'], 1)} | "
            f"{spread(ups)} | {efficiency} | {share if threads == '1' else ''} | {versus} | "
            f"{len(found['2'])} |"
        )
    return "\n".join(lines)


def scaling_plot(section: dict[str, Any], path: Path) -> bool:
    """The speed-up at 2 workers of each mode, ctrain and by hand (one thread each), and of the
    independent pair (the ceiling, in grey): the median as a bar, the repetitions' range as its
    error bar, linear scaling as a line. False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rates = section["rates"]
    labels, medians, lows, highs, colours = [], [], [], [], []
    for key, found in rates.items():
        mode, how, threads = key.split("/")
        one = "multiworker" if how == "pair" else mode
        ups = speedups(rates.get(f"{one}/ctrain/1", {}).get("1", []), found["2"])
        if threads != "1" or not ups:
            continue
        launched = {"ctrain": "ctrain launch", "hand": "by hand", "pair": "independent pair"}
        labels.append(f"{mode}\n{launched[how]}")
        colours.append("tab:gray" if how == "pair" else "tab:blue")
        medians.append(median(ups))
        lows.append(median(ups) - min(ups))
        highs.append(max(ups) - median(ups))
    figure, axes = plt.subplots(figsize=(7, 4))
    axes.bar(labels, medians, yerr=[lows, highs], capsize=6, color=colours)
    axes.axhline(2.0, linestyle="--", color="gray", label="linear (2.00x)")
    for x, value in enumerate(medians):
        axes.annotate(f"{value:.2f}x", (x, value), textcoords="offset points", xytext=(14, 4))
    axes.set_ylim(0, 2.2)
    axes.set_ylabel("speed-up, 2 workers over 1")
    axes.set_title(
        f"MobileNetV2 64px, batch 32/worker, 1 thread: median and range of {section['reps']}"
    )
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True
