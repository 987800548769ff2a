"""Costs: time to the first training step, peak memory per worker (CLI start-up: startup.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    CTRAIN,
    MODEL,
    PYTHON,
    REPO,
    SYNTHETIC,
    clean_env,
    first_step,
    median,
    ratio,
    run,
    say,
)

DIRECT = "python script.py (direct)"
DOCKER = "docker run IMAGE python script.py"


def launch_variants(image: str | None, work: Path) -> dict[str, Callable[[Path], list[str]]]:
    """How to start the same short benchmark, by name; the docker ones when there is an image."""
    short = ["--num-warmup-batches", "1", "--num-batches-per-iter", "1", "--num-iters", "1"]

    def script(report: Path) -> list[str]:
        return [*SYNTHETIC, *MODEL, *short, "--threads", "1", "--report", str(report)]

    variants: dict[str, Callable[[Path], list[str]]] = {
        DIRECT: lambda r: [PYTHON, *script(r)],
        "ctrain launch -- python script.py": lambda r: [CTRAIN, "launch", "--", PYTHON, *script(r)],
        "srun -n 1 ctrain launch -- python script.py": lambda r: [
            "srun",
            "-n",
            "1",
            "-t",
            "10",
            CTRAIN,
            "launch",
            "--",
            PYTHON,
            *script(r),
        ],  # fmt: skip
    }
    if image:
        mounts = [REPO] if work.is_relative_to(REPO) else [REPO, work]
        binds = [arg for m in mounts for arg in ("-v", f"{m}:{m}")]
        ctrain_binds = [arg for m in mounts for arg in ("-B", str(m))]
        variants[DOCKER] = lambda r: [
            "docker", "run", "--rm", "--network", "host", "--ipc", "host", *binds,
            "--entrypoint", "python", image, *script(r),
        ]  # fmt: skip
        variants["ctrain exec --runtime docker IMAGE -- python script.py"] = lambda r: [
            CTRAIN, "exec", "--runtime", "docker", *ctrain_binds, image, "--", "python",
            *script(r),
        ]  # fmt: skip
    return variants


def launch_overhead(reps: int, image: str | None, work: Path) -> dict[str, Any]:
    """Each variant ``reps`` times (the docker ones at most twice), interleaved."""
    variants = launch_variants(image, work)
    env = clean_env()
    starts: dict[str, list[float]] = {name: [] for name in variants}
    steps: dict[str, list[float]] = {name: [] for name in variants}
    failures: dict[str, str] = {}
    for rep in range(reps):
        for i, (name, make) in enumerate(variants.items()):
            if name in failures or ("docker" in name and rep >= 2):
                continue
            report = work / f"launch-{i}"
            say(f"launch overhead {rep + 1}/{reps}: {name}")
            try:
                start, step = first_step(make(report), env, report, work / f"launch-{i}.log")
            except (RuntimeError, OSError, KeyError, subprocess.TimeoutExpired) as exc:
                failures[name] = str(exc)[-300:]
                continue
            starts[name].append(start)
            steps[name].append(step)
    rows = []
    for name in variants:
        against = DOCKER if name.startswith("ctrain exec") else DIRECT
        rows.append(
            {
                "how": name,
                "runs": len(steps[name]),
                "to_start_s": median(starts[name]),
                "to_first_step_s": median(steps[name]),
                "start_overhead_s": median(starts[name]) - median(starts[against]),
                "step_overhead_s": median(steps[name]) - median(steps[against]),
                "against": "docker run" if against == DOCKER else "direct",
                "failed": failures.get(name),
            }
        )
    note = None if image else "no image with TensorFlow and ctrain (`make image-cpu`): pending"
    return {"reps": reps, "rows": rows, "docker_note": note, "image": image}


def launch_table(section: dict[str, Any]) -> str:
    lines = [
        "Time from starting the command to the script's Python starting, and to the end of its "
        "first training step (ctrain.bench.synthetic, MobileNetV2 64x64, batch 32, one thread; "
        f"median of {section['reps']} runs, docker ones of {min(2, section['reps'])}; the first "
        "step includes the "
        "TensorFlow import and the model build):",
        "",
        "| how | to Python | to first step | overhead to Python | overhead to first step "
        "| against |",
        "|:--|--:|--:|--:|--:|:--|",
    ]
    for r in section["rows"]:
        if r["failed"]:
            lines.append(f"| `{r['how']}` | failed: {r['failed'][-120:]} | | | | |")
            continue
        lines.append(
            f"| `{r['how']}` | {r['to_start_s']:.2f} s | {r['to_first_step_s']:.2f} s | "
            f"{r['start_overhead_s']:+.2f} s | {r['step_overhead_s']:+.2f} s | {r['against']} |"
        )
    if section["docker_note"]:
        lines += ["", f"Docker runtime: {section['docker_note']}."]
    return "\n".join(lines)


def memory(work: Path, scaling_found: dict[str, Any], steps: int) -> dict[str, Any]:
    say("memory: the same benchmark run directly")
    report = work / "memory-direct"
    argv = [
        PYTHON, *SYNTHETIC, *MODEL, "--num-warmup-batches", "3", "--num-batches-per-iter",
        str(max(1, steps // 5)), "--num-iters", "5", "--threads", "1", "--report", str(report),
    ]  # fmt: skip
    run(argv, clean_env(), log=work / "memory-direct.log")
    direct = float(json.loads((report / "rank0.json").read_text())["peak_rss_mb"])
    rows = [{"how": "python -m ctrain.bench.synthetic (direct)", "peak_rss_mb": [direct]}]
    for mode, found in scaling_found.items():
        for r in found.get("runs", []):
            launcher = "srun --mpi=pmix" if mode == "horovod" else "srun"
            rows.append(
                {
                    "how": f"{launcher} -n {r['workers']} ctrain launch --mode {mode}",
                    "peak_rss_mb": r["peak_rss_mb"],
                }
            )
    return {"direct_mb": direct, "rows": rows}


def memory_table(section: dict[str, Any]) -> str:
    direct = section["direct_mb"]
    lines = [
        "Peak resident memory per worker (ru_maxrss of each rank, MobileNetV2 64x64, batch 32):",
        "",
        "| how | per worker | against direct |",
        "|:--|--:|--:|",
    ]
    for r in section["rows"]:
        values = r["peak_rss_mb"]
        shown = ", ".join(f"{v:.0f} MB" for v in values)
        worst = max(values)
        lines.append(f"| `{r['how']}` | {shown} | {ratio(worst, direct)} |")
    return "\n".join(lines)
