"""What `ctrain launch --profile` costs a training script: steps/s with and without it.

One small tf-keras script, unmodified (benchmarks/scripts/keras_timed_steps.py: a small CNN,
32x32 images, batch 32, random data, one process of one thread; it times every step itself),
run under `ctrain launch`, and under `ctrain launch --profile FIRST-LAST`:

  outside  the steps outside the traced window (after a warm-up), where only ctrain's step
           hooks run: must match the run without --profile within the noise
  inside   the steps inside the window, TensorFlow's profiler on (the window's first and last
           step left out: they start and stop the trace)
  edges    what starting and stopping the trace add, once: the window's first and last step
           less the run's median step outside the window (stopping writes the trace and the
           table of where the time went)

Outside and inside, two figures: steps/s (the steps over the wall-clock time they took) and
the process's CPU time per step (all its threads). On 2 cores shared with other work the wall
clock moves with that work; CPU time much less.

Each repetition runs without, with, without: with/without is the run with --profile against
the mean of the two around it, over the same steps, and the second run without against the
first says how far chance alone moves the figures on this machine.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from common import CTRAIN, PYTHON, REPO, clean_env, median, run, say
from scaling import spread

SCRIPT = REPO / "benchmarks" / "scripts" / "keras_timed_steps.py"
STEPS = 800  # of about 5 ms each here
WARMUP = 20  # first steps left out everywhere (tracing, tf.data's autotuning)
FIRST, LAST = 301, 400  # the traced window: 100 steps, the most --profile takes
VARIANTS = ("without", "with")
ORDER = ("without", "with", "without")  # in every repetition
Rep = dict[str, list[dict[str, float]]]  # one repetition's runs, by variant


def outside_steps() -> list[int]:
    """Steps after the warm-up that are not in the traced window (counted from 1)."""
    return [s for s in range(WARMUP + 1, STEPS + 1) if not FIRST <= s <= LAST]


def inside_steps() -> list[int]:
    """The window's steps less its first and last (they start and stop the trace)."""
    return list(range(FIRST + 1, LAST))


def step_seconds(began: float, ends: Sequence[float]) -> dict[int, float]:
    """Each step's duration by step number (from 1): end to end, the first from the start."""
    points = [began, *ends]
    return {step: points[step] - points[step - 1] for step in range(1, len(points))}


def total(seconds: dict[int, float], steps: Sequence[int]) -> float:
    return sum(seconds[s] for s in steps)


def measure(wall: dict[int, float], cpu: dict[int, float]) -> dict[str, float]:
    """One run: steps/s and CPU milliseconds per step outside and inside the window, and the
    milliseconds its first and last step took more than a median step outside it."""
    outside, inside = outside_steps(), inside_steps()
    typical = median([wall[s] for s in outside])
    return {
        "outside_sps": len(outside) / total(wall, outside),
        "inside_sps": len(inside) / total(wall, inside),
        "outside_cpu_ms": total(cpu, outside) / len(outside) * 1000,
        "inside_cpu_ms": total(cpu, inside) / len(inside) * 1000,
        "start_ms": (wall[FIRST] - typical) * 1000,
        "stop_ms": (wall[LAST] - typical) * 1000,
    }


def argv(variant: str, out: Path, profile_dir: Path) -> list[str]:
    profile = ["--profile", f"{FIRST}-{LAST}", "--profile-dir", str(profile_dir)]
    return [
        CTRAIN, "launch", *(profile if variant == "with" else []), "--", PYTHON, str(SCRIPT),
        "--steps", str(STEPS), "--out", str(out),
    ]  # fmt: skip


def profile_overhead(work: Path, reps: int) -> dict[str, Any]:
    """``reps`` repetitions of without, with, without: the two runs without --profile on
    either side of the one with it, so a change of load moves both sides alike."""
    here = work / "profile-overhead"
    here.mkdir(parents=True, exist_ok=True)
    env = clean_env(threads=1)  # one thread, as the other sections: steadier on 2 shared cores
    runs: list[Rep] = []
    failure = None
    for rep in range(reps):
        found: Rep = {v: [] for v in VARIANTS}
        for turn, variant in enumerate(ORDER):
            say(f"profiling overhead {rep + 1}/{reps}: {variant} --profile")
            out = here / f"{rep}-{turn}-{variant}.json"
            try:
                run(argv(variant, out, here / "profile"), env, timeout=300,
                    log=here / f"{rep}-{turn}-{variant}.log")  # fmt: skip
                data = json.loads(out.read_text())
                wall = step_seconds(data["began"], data["ends"])
                cpu = step_seconds(data["cpu_began"], data["cpu_ends"])
                found[variant].append(measure(wall, cpu))
            except (RuntimeError, OSError, KeyError, ValueError) as exc:
                failure = f"{variant}: {exc}"
                break
        if failure:
            break
        runs.append(found)
    try:
        tf = version("tensorflow")
    except PackageNotFoundError:
        tf = "not installed"
    return {"runs": runs, "reps": reps, "failed": failure, "tensorflow": tf}


def overhead(rep: Rep, key: str) -> float:
    """With over without in one repetition: the run with --profile against the mean of the
    two without it around it."""
    before, after = rep["without"]
    return rep["with"][0][key] / ((before[key] + after[key]) / 2)


def noise(rep: Rep, key: str) -> float:
    """The second run without --profile over the first: what chance alone moves."""
    before, after = rep["without"]
    return after[key] / before[key]


def profile_table(section: dict[str, Any]) -> str:
    runs: list[Rep] = section["runs"]
    if section["failed"]:
        return f"failed: {section['failed'][-300:]}"

    def of(variant: str, key: str) -> list[float]:
        return [r[key] for rep in runs for r in rep[variant]]

    def row(name: str, key: str, ratios: bool = True) -> str:
        cells = [spread(of(v, key), 1) for v in ("without", "with")]
        if ratios:
            cells += [spread([f(rep, key) for rep in runs], 3) for f in (overhead, noise)]
        else:
            cells += ["", ""]
        return f"| {name} | {' | '.join(cells)} |"

    outside = f"{WARMUP + 1}-{FIRST - 1}, {LAST + 1}-{STEPS}"
    inside = f"{FIRST + 1}-{LAST - 1}"
    lines = [
        "`ctrain launch --profile` on a small tf-keras script run unmodified "
        "(benchmarks/scripts/keras_timed_steps.py: small CNN, 32x32, batch 32, one process of "
        f"one thread, TensorFlow {section['tensorflow']}; {STEPS} steps, steps {FIRST}-{LAST} "
        f"traced), against the same without it; {len(runs)} repetitions of without, with, "
        "without; median (min - max) over the runs, and over the repetitions for the ratios "
        "(with against the mean of the two without around it; the second without against the "
        "first, which is the noise):",
        "",
        "| steps | without `--profile` | with `--profile` | with / without | without / without |",
        "|:--|--:|--:|--:|--:|",
        row(f"outside the window ({outside}), steps/s", "outside_sps"),
        row(f"inside the window ({inside}), steps/s", "inside_sps"),
        row("outside the window, CPU ms per step", "outside_cpu_ms"),
        row("inside the window, CPU ms per step", "inside_cpu_ms"),
        row(f"the window's first step ({FIRST}), ms more than a median step", "start_ms", False),
        row(f"the window's last step ({LAST}), ms more than a median step", "stop_ms", False),
    ]
    return "\n".join(lines)
