"""A small tf-keras training script as users write it, nothing from ctrain, that times its own
steps (benchmarks/profile_overhead.py runs it under `ctrain launch`, with and without
`--profile`).

    python keras_timed_steps.py --steps N --out FILE [--batch-size B] [--image-size S]

A small CNN on one batch of random images, repeated; `Model.fit` for one epoch of N steps. A
Keras callback notes the time at the end of every step (Keras hands it numpy logs, so the step
has finished), and the script writes FILE: {"steps": N, "began": t0, "ends": [t1, ..., tN],
"cpu_began": c0, "cpu_ends": [c1, ..., cN]}: seconds of time.perf_counter and of the
process's CPU time (time.process_time, all its threads), t0 and c0 at the start of training.
"""

import argparse
import json
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--classes", type=int, default=10)
parser.add_argument("--out", required=True, help="JSON file of the step times")
args = parser.parse_args()

tf.keras.utils.set_random_seed(42)
rng = np.random.default_rng(0)
size = args.image_size
images = rng.random((args.batch_size, size, size, 3), dtype=np.float32)
labels = rng.integers(0, args.classes, size=args.batch_size)
data = tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
data = data.batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

model = tf.keras.Sequential(
    [
        tf.keras.layers.Input((size, size, 3)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(args.classes),
    ]
)
model.compile(
    optimizer=tf.keras.optimizers.SGD(0.01),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)


class StepTimes(tf.keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.began = self.cpu_began = 0.0
        self.ends: list[float] = []
        self.cpu_ends: list[float] = []

    def on_train_begin(self, logs: object = None) -> None:
        self.began, self.cpu_began = time.perf_counter(), time.process_time()

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        self.ends.append(time.perf_counter())
        self.cpu_ends.append(time.process_time())


timer = StepTimes()
model.fit(data, steps_per_epoch=args.steps, epochs=1, callbacks=[timer], verbose=0)
with open(args.out, "w", encoding="utf-8") as handle:
    times = {"began": timer.began, "ends": timer.ends}
    cpu = {"cpu_began": timer.cpu_began, "cpu_ends": timer.cpu_ends}
    json.dump({"steps": args.steps, **times, **cpu}, handle)
