"""A Keras 3 script through ctrain's training API: one script for every mode.

    python keras3_ctrain.py OUT_DIR [true]    (true: compile with jit_compile=True)

ctrain.distributed.init() gives the strategy (or Horovod), the batch size per process, the
learning rate scaled with the replicas, the optimizer (gradients averaged under Horovod) and the
callbacks (initial broadcast, metric averaging, warm-up). Each rank prints `RESULT {json}`.
"""

import json
import sys

import keras
import numpy as np
import tensorflow as tf

import ctrain.distributed

ctx = ctrain.distributed.init()
out = sys.argv[1]
jit_compile = True if sys.argv[2:] == ["true"] else "auto"

rng = np.random.default_rng(42)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ np.linspace(-1, 1, 8, dtype="float32") + 0.3).reshape(-1, 1)
dataset = ctx.shard(tf.data.Dataset.from_tensor_slices((x, y))).batch(ctx.batch_size(32))

with ctx.scope():
    keras.utils.set_random_seed(ctx.rank + 1)  # Horovod: rank 0's weights are broadcast
    model = keras.Sequential(
        [keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    optimizer = keras.optimizers.SGD(learning_rate=ctx.scale_lr(0.02), momentum=0.9)
    model.compile(
        optimizer=ctx.optimizer(optimizer),
        loss="mse",
        metrics=["mae"],
        jit_compile=jit_compile,
    )

history = model.fit(
    dataset, epochs=3, callbacks=ctx.callbacks(warmup_epochs=2), verbose=2 if ctx.is_chief else 0
)
if ctx.is_chief:
    model.save(f"{out}/model.keras")

result = {
    "rank": ctx.rank,
    "mode": ctx.mode.value,
    "replicas": ctx.replicas,
    "optimizer": type(model.optimizer).__name__,
    "weights": [float(v) for w in model.get_weights() for v in w.ravel()],
    "loss": [float(v) for v in history.history["loss"]],
    "lr": [float(v) for v in history.history.get("lr", [])],  # warm-up: replicas > 1
}
print("RESULT " + json.dumps(result), flush=True)
