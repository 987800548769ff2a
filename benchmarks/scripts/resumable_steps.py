"""A tiny model trained through ctrain's API (``ctx.resume``, ``ctx.callbacks``,
``ctx.preemption_callbacks``) that notes its progress for benchmarks/faults.py.

    python resumable_steps.py OUT EPOCHS [--rows N] [--checkpoint-every E] [--log-steps]

Every rank writes, under OUT:

  start-rank<R>.json  when training begins: {"pid": ..., "steps_per_epoch": ...}
  steps-rank<R>.log   with --log-steps, "EPOCH STEP" at the end of every training step
                      (0-based, flushed at once: the benchmark reads it to signal at a step,
                      and to find the last step this rank did)
  timing-rank<R>.json at the end of training: the median step of the epochs after the first,
                      from the end of one step to the end of the next, in milliseconds of
                      wall clock and of the process's CPU time (all its threads), and the
                      steps it is the median of (a median: a moment of load from other work
                      on the machine moves it little)
  end-rank<R>.json    when fit ends with SystemExit (ctrain's stop: 75): its code

The checkpoints go to OUT/ckpt, one every ``--checkpoint-every`` epochs and one at the stop.
"""

import argparse
import json
import os
import statistics
import time
from itertools import pairwise
from pathlib import Path

import numpy as np

import ctrain.distributed

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402  (after init: TF_USE_LEGACY_KERAS is set by then)

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("epochs", type=int)
parser.add_argument("--rows", type=int, default=512, help="examples per epoch (batch 16)")
parser.add_argument("--checkpoint-every", type=int, default=1, help="epochs")
parser.add_argument("--log-steps", action="store_true")
args = parser.parse_args()
out: Path = args.out
out.mkdir(parents=True, exist_ok=True)

tf.keras.utils.set_random_seed(1234)
rng = np.random.default_rng(0)
x = rng.normal(size=(args.rows, 8)).astype("float32")
y = (np.sin(x @ np.arange(1, 9, dtype="float32") / 8) + 0.5).reshape(-1, 1)
data = ctx.shard(tf.data.Dataset.from_tensor_slices((x, y)))
data = data.shuffle(1024, seed=7, reshuffle_each_iteration=False)  # the same order on resume
data = data.batch(ctx.batch_size(16), drop_remainder=True)

config = {"rows": args.rows}
with ctx.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(8,)),
            tf.keras.layers.Dense(8, activation="tanh"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=ctx.optimizer(tf.keras.optimizers.Adam(0.01)), loss="mse")
checkpoints = out / "ckpt"
initial_epoch = ctx.resume(model, checkpoints, config=config)


def write_json(name: str, value: object) -> None:
    (out / f"{name}.tmp").write_text(json.dumps(value))
    (out / f"{name}.tmp").rename(out / name)  # whole when seen


class Progress(tf.keras.callbacks.Callback):
    """Writes the files above. Before the preemption callback in fit's list: a stop's exit comes
    right after this one's hooks of the last step."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = out / f"steps-rank{ctx.rank}.log"
        self.epoch = 0
        self.ends: list[tuple[float, float]] = []  # wall clock, CPU time

    def on_train_begin(self, logs=None):
        record = {"pid": os.getpid(), "steps_per_epoch": self.params["steps"]}
        write_json(f"start-rank{ctx.rank}.json", record)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch > initial_epoch:
            self.ends.append((time.perf_counter(), time.process_time()))
        if args.log_steps:
            with self.steps.open("a") as f:
                f.write(f"{self.epoch} {batch}\n")

    def on_train_end(self, logs=None):
        steps = list(pairwise(self.ends))
        if not steps:
            return

        def median_ms(clock: int) -> float:
            return statistics.median(b[clock] - a[clock] for a, b in steps) * 1000

        timing = {"wall_ms": median_ms(0), "cpu_ms": median_ms(1), "steps": len(steps)}
        write_json(f"timing-rank{ctx.rank}.json", timing)


callbacks = [
    *ctx.callbacks(),
    Progress(),
    *ctx.preemption_callbacks(checkpoints, config=config, every_epochs=args.checkpoint_every),
]
try:
    model.fit(data, epochs=args.epochs, initial_epoch=initial_epoch, callbacks=callbacks, verbose=0)
except SystemExit as stop:
    write_json(f"end-rank{ctx.rank}.json", {"code": stop.code})
    raise
