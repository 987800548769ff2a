"""Synthetic images/second benchmark through ctrain, in the style of Horovod's
tensorflow2_synthetic_benchmark.py: random images, a Keras application model, warm-up steps left
out, images/second per worker as mean +- 1.96 std over the timed iterations, and the total.

    ctrain launch -- python examples/synthetic_benchmark.py                        # one process
    srun -n 4 ctrain launch -- python examples/synthetic_benchmark.py              # multiworker
    srun --mpi=pmix -n 4 ctrain launch --mode horovod -- python examples/synthetic_benchmark.py
    python examples/synthetic_benchmark.py --model MobileNetV2 --image-size 32 --threads 1  # CPU

A worker here is one model replica: one GPU, or one process on CPU. `ctrain bench` runs this at
several worker counts and reports the speed-up; --report DIR makes each rank write
DIR/rank<R>.json (rates, peak resident memory, when the first step ended) for it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import sys
import time
from pathlib import Path

START = time.time()  # wall clock at interpreter start (nearly): for the time to the first step


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
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


ARGS = parse_args()
if ARGS.threads > 0:  # before TensorFlow starts its thread pools (ctrain's init creates them)
    for name in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ[name] = str(ARGS.threads)

import numpy as np  # noqa: E402

import ctrain.distributed  # noqa: E402

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402  (after init, which sets TF_USE_LEGACY_KERAS)


def log(text: str) -> None:
    if ctx.is_chief:
        print(text, flush=True)


class IterationTimer(tf.keras.callbacks.Callback):
    """Per-worker images/second over each run of ``per_iter`` steps after the warm-up."""

    def __init__(self, warmup: int, per_iter: int, images_per_step: int) -> None:
        super().__init__()
        self.warmup, self.per_iter, self.images_per_step = warmup, per_iter, images_per_step
        self.rates: list[float] = []
        self.first_step_at: float | None = None
        self.started = 0.0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        # Keras hands callbacks numpy logs, so the step has finished when this runs.
        step = batch + 1
        now = time.perf_counter()
        if self.first_step_at is None:
            self.first_step_at = time.time()
        if step == self.warmup:
            log("Running benchmark...")
            self.started = now
        elif step > self.warmup and (step - self.warmup) % self.per_iter == 0:
            rate = self.images_per_step * self.per_iter / (now - self.started)
            self.rates.append(rate)
            log(f"Iter #{len(self.rates) - 1}: {rate:.1f} img/sec per worker")
            self.started = time.perf_counter()


def synthetic_data(args: argparse.Namespace) -> tf.data.Dataset:
    """One global batch of random images and labels, repeated; each worker its share."""
    count = ctx.batch_size(args.batch_size)
    rng = np.random.default_rng(ctx.rank)
    images = rng.random((count, args.image_size, args.image_size, 3), dtype=np.float32)
    labels = rng.integers(0, args.classes, size=count)
    data = ctx.shard(tf.data.Dataset.from_tensor_slices((images, labels)).repeat())
    return data.batch(count, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def build(args: argparse.Namespace) -> tf.keras.Model:
    try:
        application = getattr(tf.keras.applications, args.model)
    except AttributeError:
        sys.exit(f"synthetic_benchmark: no tf.keras.applications.{args.model} (try ResNet50)")
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


def write_json(path: Path, data: dict) -> None:
    """Whole or not at all: a temporary file renamed over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(temporary, path)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def main(args: argparse.Namespace) -> None:
    tf.keras.utils.set_random_seed(42)
    model = build(args)
    device = "GPU" if tf.config.list_physical_devices("GPU") else "CPU"
    log(f"Model: {args.model}")
    log(f"Batch size: {args.batch_size} (per worker), image size {args.image_size}")
    log(f"Mode: {ctx.mode.value}, processes: {ctx.size}, workers (replicas): {ctx.replicas}")
    log(f"Device: {device}, threads per process: {args.threads or 'TensorFlow default'}")
    log("Running warmup...")
    timer = IterationTimer(args.num_warmup_batches, args.num_batches_per_iter, args.batch_size)
    steps = args.num_warmup_batches + args.num_batches_per_iter * args.num_iters
    model.fit(
        synthetic_data(args),
        steps_per_epoch=steps,
        epochs=1,
        callbacks=[*ctx.callbacks(), timer],
        verbose=0,
    )
    rates = np.array(timer.rates)
    mean, conf = float(rates.mean()), float(1.96 * rates.std())
    log(f"Img/sec per worker: {mean:.1f} +-{conf:.1f}")
    log(
        f"Total img/sec on {ctx.replicas} worker(s): {ctx.replicas * mean:.1f} +-"
        f"{ctx.replicas * conf:.1f}"
    )
    if args.report:
        report = {
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
        write_json(Path(args.report, f"rank{ctx.rank}.json"), report)


if __name__ == "__main__":
    main(ARGS)
