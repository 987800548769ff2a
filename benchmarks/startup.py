"""CLI start-up against Click's own: `ctrain --version`, `ctrain --help` and
`ctrain launch --explain` (a plain environment: no Slurm or MPI variables) against
`python -c "import click"`, the least any Click program can take.

    .venv/bin/python benchmarks/startup.py [--reps 15]    (in `make bench`: section startup)

The runs are interleaved, one of each command per round, so a busy machine slows all of them
alike. For each command: the median, the spread (quartiles, min and max) in milliseconds, and
the median's ratio to Click's; the goal is at most 1.3x.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from common import CTRAIN, PYTHON, clean_env, median, run, say, spread_ms

BASE = 'python -c "import click"'
COMMANDS = {
    BASE: [PYTHON, "-c", "import click"],
    "ctrain --version": [CTRAIN, "--version"],
    "ctrain --help": [CTRAIN, "--help"],
    "ctrain launch --explain": [CTRAIN, "launch", "--explain"],
}
GOAL = 1.3


def startup(reps: int) -> dict[str, Any]:
    """Wall time of each command, ``reps`` interleaved rounds; statistics in milliseconds."""
    env = clean_env(threads=None)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(reps):
        for name, argv in COMMANDS.items():
            start = time.perf_counter()
            run(argv, env, timeout=60)
            times[name].append((time.perf_counter() - start) * 1000)
    base = median(times[BASE])
    rows = [
        {"command": name, **spread_ms(t), "vs_click": median(t) / base} for name, t in times.items()
    ]
    return {"reps": reps, "goal": GOAL, "rows": rows}


def startup_table(section: dict[str, Any]) -> str:
    lines = [
        f"CLI start-up, {section['reps']} interleaved runs of each (goal: at most "
        f"{section['goal']}x Click's):",
        "",
        "| command | median | quartiles | min - max | against `import click` |",
        "|:--|--:|--:|--:|--:|",
    ]
    for r in section["rows"]:
        lines.append(
            f"| `{r['command']}` | {r['median_ms']:.0f} ms | {r['q1_ms']:.0f} - {r['q3_ms']:.0f} ms"
            f" | {r['min_ms']:.0f} - {r['max_ms']:.0f} ms | {r['vs_click']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="rounds (at least 15 for the README)")
    args = parser.parse_args(argv)
    say(f"start-up, {args.reps} rounds")
    print(startup_table(startup(args.reps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
