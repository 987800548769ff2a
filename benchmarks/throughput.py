"""Throughput of the input pipeline against synthetic tensors (scaling is in scaling.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common import PYTHON, TRANSFER, clean_env, ratio, run, say


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
