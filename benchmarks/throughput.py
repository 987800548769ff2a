"""Throughput: data-parallel scaling through `ctrain bench`, and the input pipeline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import BENCH_MODEL, CTRAIN, PYTHON, REPO, TRANSFER, clean_env, ratio, run, say


def scaling(out: Path, steps: int) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for mode in ("multiworker", "horovod"):
        target = out / f"scaling-{mode}"
        say(f"scaling: ctrain bench --mode {mode} --workers 1,2 --threads 1")
        argv = [
            CTRAIN, "bench", "--mode", mode, "--workers", "1,2", *BENCH_MODEL, "--threads", "1",
            "--warmup", "3", "--steps", str(steps), "--iters", "5", "--timeout", "600",
            "--out", str(target),
        ]  # fmt: skip
        try:
            done = subprocess.run(
                argv, env=clean_env(threads=None), cwd=REPO, timeout=1300, stdout=sys.stderr
            )
            if done.returncode != 0:
                raise RuntimeError(f"ctrain bench exited {done.returncode}")
            data = json.loads((target / "bench.json").read_text())
            found[mode] = {
                "command": " ".join(["ctrain", *argv[1:]]),
                "scaling": data["scaling"],
                "runs": data["runs"],
                "dir": str(target),
            }
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            found[mode] = {"failed": str(exc)}
    return found


def scaling_table(section: dict[str, Any]) -> str:
    lines = [
        "Data-parallel efficiency, 2 workers against 1, one thread each (MobileNetV2 64x64, "
        "batch 32 per worker, synthetic data; `ctrain bench`, both counts in the mode named):",
        "",
        "| mode | 1 worker | 2 workers | speed-up | scaling efficiency |",
        "|:--|--:|--:|--:|--:|",
    ]
    for mode, found in section.items():
        if "failed" in found:
            lines.append(f"| {mode} | failed: {found['failed']} | | | |")
            continue
        one, two = found["scaling"][0], found["scaling"][-1]
        lines.append(
            f"| {mode} | {one['total']:.1f} img/s | {two['total']:.1f} img/s | "
            f"{two['speedup']:.2f}x | {two['efficiency']:.0%} |"
        )
    return "\n".join(lines)


def input_pipeline(work: Path) -> dict[str, Any]:
    data_dir = work / "tfds"
    say("input: writing the synthetic shapes as a TFDS dataset")
    run(
        [PYTHON, "-m", "ctrain.train.demo_data", "tfds", str(data_dir), "--train", "96",
         "--test", "32", "--size", "64"],
        clean_env(threads=None),
        log=work / "input-data.log",
    )  # fmt: skip
    common = [
        TRANSFER, "--data-dir", str(data_dir), "--dataset", "ctrain_shapes", "--image-size",
        "32", "--batch", "16", "--epochs", "3", "--steps-per-epoch", "6", "--val-split", "none",
        "--out", str(work / "transfer"),
    ]  # fmt: skip
    variants = {
        "real": ["--report", str(work / "input-real")],
        "synthetic": ["--synthetic", "--report", str(work / "input-synthetic")],
        "pipeline only": ["--pipeline-only", "--report", str(work / "input-pipeline")],
    }
    rates: dict[str, float] = {}
    for name, extra in variants.items():
        say(f"input: resnet50_transfer.py, {name}")
        report = Path(extra[-1])
        run([PYTHON, *common, *extra], clean_env(threads=None), log=work / f"input-{name}.log")
        data = json.loads((report / "rank0.json").read_text())
        key = "pipeline_images_per_second" if name == "pipeline only" else "images_per_second"
        rates[name] = float(data[key])
    return {"rates": rates}


def input_table(section: dict[str, Any]) -> str:
    r = section["rates"]
    return "\n".join(
        [
            "Input pipeline (examples/resnet50_transfer.py: ResNet-50, 32x32 from 64x64 "
            "TFRecords, batch 16, one process, TensorFlow's threads; epochs 2-3 of 3):",
            "",
            "| data | images/s | against synthetic |",
            "|:--|--:|--:|",
            f"| synthetic tensors (no pipeline) | {r['synthetic']:.1f} | 1.00x |",
            f"| TFDS pipeline (shard, parallel map, cache, shuffle, batch, prefetch) | "
            f"{r['real']:.1f} | {ratio(r['real'], r['synthetic'])} |",
            f"| the pipeline alone, no training | {r['pipeline only']:.0f} | "
            f"{ratio(r['pipeline only'], r['synthetic'])} |",
        ]
    )
