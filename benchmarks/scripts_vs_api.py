"""Scripts as users write them against the same through ctrain's API: 2 workers, images/s.

Two pairs, each the same model (MobileNetV2 64x64, 10 classes), random data, batch 32 per worker
and plain SGD; the outside scripts are benchmarks/scripts/, the API side is ctrain's own
`python -m ctrain.bench.synthetic` (ctx.optimizer, ctx.callbacks):

  horovod  hvd_synthetic.py (hvd.DistributedOptimizer, hvd.callbacks) against the API, both
           under `srun --mpi=pmix -n 2 ctrain launch --mode horovod`
  keras3   keras3_mwms_synthetic.py (`import keras`, builds MultiWorkerMirroredStrategy itself)
           against the API on Keras 3 (`--keras 3`), both under `srun -n 2 ctrain launch`

The four runs are interleaved and repeated, each side of a pair first in turn, so load on the
machine moves both sides; the table gives the median ratio and its range over the repetitions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common import CTRAIN, PYTHON, REPO, SYNTHETIC, clean_env, median, run, say

SCRIPTS = REPO / "benchmarks" / "scripts"
SHAPE = ["--model", "MobileNetV2", "--image-size", "64", "--batch-size", "32", "--classes", "10"]
LAUNCHERS = {
    "horovod": ["srun", "--mpi=pmix", "-n", "2", "-t", "10", CTRAIN, "launch", "--mode", "horovod"],
    "keras3": ["srun", "-n", "2", "-t", "10", CTRAIN, "launch"],
}
OUTSIDE = {"horovod": "hvd_synthetic.py", "keras3": "keras3_mwms_synthetic.py"}


def commands(pair: str, per_iter: int, iters: int, report: Path) -> dict[str, list[str]]:
    """The outside script and the API benchmark of ``pair``, the same steps timed in both: the
    script's first epoch of ``per_iter`` batches is its warm-up, the API's ``per_iter`` batches."""
    steps = ["--num-batches-per-iter", str(per_iter), "--num-iters", str(iters)]
    keras = ["--keras", "3"] if pair == "keras3" else []
    api = [*SYNTHETIC, *SHAPE, *steps, "--num-warmup-batches", str(per_iter)]
    return {
        "script": [*LAUNCHERS[pair], "--", PYTHON, str(SCRIPTS / OUTSIDE[pair]), *SHAPE, *steps],
        "api": [*LAUNCHERS[pair], *keras, "--", PYTHON, *api, "--report", str(report)],
    }


def images_per_second(side: str, stdout: str, report: Path) -> float:
    """Total images/s of a run: the script's `RESULT` line, the API's rank0.json."""
    if side == "api":
        return float(json.loads((report / "rank0.json").read_text())["total_mean"])
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise RuntimeError("the script printed no RESULT line")
    return float(json.loads(lines[-1].removeprefix("RESULT "))["total"])


def scripts_vs_api(work: Path, reps: int, per_iter: int = 5, iters: int = 4) -> dict[str, Any]:
    """Each pair's two sides ``reps`` times, interleaved (script, API, API, script, ...)."""
    rates: dict[str, dict[str, list[float]]] = {p: {"script": [], "api": []} for p in LAUNCHERS}
    failures: dict[str, str] = {}
    env = clean_env(threads=1)
    for rep in range(reps):
        for pair in LAUNCHERS:
            if pair in failures:
                continue
            report = work / f"scripts-{pair}-report"
            sides = list(commands(pair, per_iter, iters, report).items())
            for side, argv in sides[:: -1 if rep % 2 else 1]:  # each side first in turn
                say(f"scripts vs API {rep + 1}/{reps}: {pair}, {side}")
                for stale in report.glob("rank*.json"):
                    stale.unlink()
                log = work / f"scripts-{pair}-{side}-{rep}.log"
                try:
                    done = run(argv, env, timeout=900, log=log)
                    rates[pair][side].append(images_per_second(side, done.stdout, report))
                except (RuntimeError, OSError, KeyError, ValueError) as exc:
                    failures[pair] = f"{side}: {exc}"
                    break
    return {"rates": rates, "failures": failures, "per_iter": per_iter, "iters": iters}


def scripts_table(section: dict[str, Any]) -> str:
    lines = [
        "Outside-style scripts against ctrain's API, 2 workers on one node (MobileNetV2 64x64, "
        f"batch 32 per worker, synthetic data, one thread each; {section['iters']} timed "
        f"iterations of {section['per_iter']} steps after as many warm-up steps; "
        "median over the interleaved repetitions, range in brackets):",
        "",
        "| pair | script as it is | ctrain's API | script / API | repetitions |",
        "|:--|--:|--:|--:|--:|",
    ]
    names = {
        "horovod": "Horovod Keras (`hvd.DistributedOptimizer`, `hvd.callbacks`)",
        "keras3": "Keras 3, `MultiWorkerMirroredStrategy` built by the script",
    }
    for pair, found in section["rates"].items():
        if pair in section["failures"]:
            lines.append(f"| {names[pair]} | failed: {section['failures'][pair]} | | | |")
            continue
        script, api = found["script"], found["api"]
        ratios = [s / a for s, a in zip(script, api, strict=True)]
        lines.append(
            f"| {names[pair]} | {median(script):.1f} img/s | {median(api):.1f} img/s | "
            f"{median(ratios):.3f} [{min(ratios):.3f} - {max(ratios):.3f}] | {len(ratios)} |"
        )
    return "\n".join(lines)
