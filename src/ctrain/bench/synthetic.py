"""Synthetic images/second benchmark through ctrain, in the style of Horovod's
tensorflow2_synthetic_benchmark.py: random images, a Keras application model, warm-up steps left
out, images/second per worker as mean +- 1.96 std over the timed iterations, and the total.

    ctrain launch -- python -m ctrain.bench.synthetic                        # one process
    srun -n 4 ctrain launch -- python -m ctrain.bench.synthetic              # multiworker
    srun --mpi=pmix -n 4 ctrain launch --mode horovod -- python -m ctrain.bench.synthetic
    python -m ctrain.bench.synthetic --model MobileNetV2 --image-size 32 --threads 1  # CPU

A worker here is one model replica: one GPU, or one process on CPU. `ctrain bench` runs this at
several worker counts and reports the speed-up; --report DIR makes each rank write
DIR/rank<R>.json (rates, peak resident memory, when the first step ended) for it. TensorFlow is
imported when the benchmark runs, never when this module is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

START = time.time()  # wall clock at interpreter start (nearly): for the time to the first step
THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ctrain.bench.synthetic",
        description=(__doc__ or "").splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", default="ResNet50", help="a tf.keras.applications model")
    parser.add_argument("--batch-size", type=int, default=32, help="images per worker per step")
    parser.add_argument("--image-size", type=int, default=224, help="height and width")
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--num-warmup-batches", type=int, default=10, help="not timed")
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=10, help="timed iterations")
    parser.add_argument("--lr", type=float, default=0.01, help="for one worker; scaled")
    parser.add_argument(
        "--threads", type=int, default=0, help="TensorFlow threads per process (0: TF decides)"
    )
    parser.add_argument("--report", metavar="DIR", help="each rank writes DIR/rank<R>.json")
    args = parser.parse_args(argv)
    if args.num_warmup_batches < 1 or args.num_batches_per_iter < 1 or args.num_iters < 1:
        parser.error("warm-up batches, batches per iteration and iterations must be >= 1")
    return args


class IterationTimer:
    """Per-worker images/second over each run of ``per_iter`` steps after the warm-up; its
    ``on_batch_end`` is a Keras ``on_train_batch_end`` (Keras hands callbacks numpy logs, so the
    step has finished when it runs)."""

    def __init__(self, warmup: int, per_iter: int, images_per_step: int, chief: bool) -> None:
        self.warmup, self.per_iter, self.images_per_step = warmup, per_iter, images_per_step
        self.chief = chief
        self.rates: list[float] = []
        self.first_step_at: float | None = None
        self.started = 0.0

    def log(self, text: str) -> None:
        if self.chief:
            print(text, flush=True)

    def on_batch_end(self, batch: int, logs: object = None) -> None:
        step = batch + 1
        now = time.perf_counter()
        if self.first_step_at is None:
            self.first_step_at = time.time()
        if step == self.warmup:
            self.log("Running benchmark...")
            self.started = now
        elif step > self.warmup and (step - self.warmup) % self.per_iter == 0:
            rate = self.images_per_step * self.per_iter / (now - self.started)
            self.rates.append(rate)
            self.log(f"Iter #{len(self.rates) - 1}: {rate:.1f} img/sec per worker")
            self.started = time.perf_counter()


def synthetic_data(tf: Any, ctx: Any, args: argparse.Namespace) -> Any:
    """One global batch of random images and labels, repeated; each worker its share."""
    import numpy as np

    count = ctx.batch_size(args.batch_size)
    rng = np.random.default_rng(ctx.rank)
    images = rng.random((count, args.image_size, args.image_size, 3), dtype=np.float32)
    labels = rng.integers(0, args.classes, size=count)
    data = ctx.shard(tf.data.Dataset.from_tensor_slices((images, labels)).repeat())
    return data.batch(count, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def build(tf: Any, ctx: Any, args: argparse.Namespace) -> Any:
    """The compiled Keras application model, in the distribution's scope."""
    application = getattr(tf.keras.applications, args.model, None)
    if application is None:
        sys.exit(f"ctrain.bench.synthetic: no tf.keras.applications.{args.model} (try ResNet50)")
    with ctx.scope():
        model = application(
            weights=None,
            input_shape=(args.image_size, args.image_size, 3),
            classes=args.classes,
        )
        optimizer = tf.keras.optimizers.SGD(ctx.scale_lr(args.lr))
        model.compile(
            optimizer=ctx.optimizer(optimizer),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        )
    return model


def write_json(path: Path, data: dict[str, object]) -> None:
    """Whole or not at all: a temporary file renamed over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(temporary, path)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def rank_report(
    ctx: Any, args: argparse.Namespace, device: str, timer: IterationTimer
) -> dict[str, object]:
    """What one rank writes to DIR/rank<R>.json for ``ctrain bench``."""
    mean = sum(timer.rates) / len(timer.rates)
    conf = 1.96 * (sum((r - mean) ** 2 for r in timer.rates) / len(timer.rates)) ** 0.5
    return {
        "rank": ctx.rank,
        "size": ctx.size,
        "replicas": ctx.replicas,
        "mode": ctx.mode.value,
        "host": socket.gethostname(),
        "device": device,
        "model": args.model,
        "batch_size": args.batch_size,
        "image_size": args.image_size,
        "threads": args.threads,
        "rates": timer.rates,
        "per_worker_mean": mean,
        "per_worker_conf": conf,
        "total_mean": ctx.replicas * mean,
        "total_conf": ctx.replicas * conf,
        "peak_rss_mb": peak_rss_mb(),
        "started_at": START,
        "first_step_at": timer.first_step_at,
    }


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.threads > 0:  # before TensorFlow starts its thread pools (ctrain's init creates them)
        for name in THREAD_VARIABLES:
            os.environ[name] = str(args.threads)
    import ctrain.distributed

    ctx = ctrain.distributed.init()
    import tensorflow as tf  # after init, which sets TF_USE_LEGACY_KERAS

    tf.keras.utils.set_random_seed(42)
    model = build(tf, ctx, args)
    device = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    timer = IterationTimer(
        args.num_warmup_batches, args.num_batches_per_iter, args.batch_size, ctx.is_chief
    )
    timer.log(f"Model: {args.model}")
    timer.log(f"Batch size: {args.batch_size} (per worker), image size {args.image_size}")
    timer.log(f"Mode: {ctx.mode.value}, processes: {ctx.size}, workers (replicas): {ctx.replicas}")
    timer.log(f"Device: {device}, threads per process: {args.threads or 'TensorFlow default'}")
    timer.log("Running warmup...")
    model.fit(
        synthetic_data(tf, ctx, args),
        steps_per_epoch=args.num_warmup_batches + args.num_batches_per_iter * args.num_iters,
        epochs=1,
        callbacks=[
            *ctx.callbacks(),
            tf.keras.callbacks.LambdaCallback(on_train_batch_end=timer.on_batch_end),
        ],
        verbose=0,
    )
    report = rank_report(ctx, args, device, timer)
    mean, conf = report["per_worker_mean"], report["per_worker_conf"]
    timer.log(f"Img/sec per worker: {mean:.1f} +-{conf:.1f}")
    timer.log(
        f"Total img/sec on {ctx.replicas} worker(s): {report['total_mean']:.1f} +-"
        f"{report['total_conf']:.1f}"
    )
    if args.report:
        write_json(Path(args.report, f"rank{ctx.rank}.json"), report)


if __name__ == "__main__":
    main()
