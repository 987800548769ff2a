"""A tiny regression trained through ctrain's API, unchanged in every mode.

    python train_tiny.py OUT_DIR [EPOCHS]

Each rank writes OUT_DIR/rank<R>.json: mode, ranks, weights, history, ports and where its
checkpoint went. The chief alone writes OUT_DIR/ckpt.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np

import ctrain.distributed

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402  (after init: TF_USE_LEGACY_KERAS is set by then)

out = Path(sys.argv[1])
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
tf.keras.utils.set_random_seed(1234)

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ np.arange(1, 9, dtype="float32") + 0.5).reshape(-1, 1)
dataset = ctx.shard(tf.data.Dataset.from_tensor_slices((x, y)))
dataset = dataset.batch(ctx.batch_size(16), drop_remainder=True)


def seen_by_this_process() -> float:
    """The sum of the features this process trains on, as fit will split them."""
    if ctx.strategy is None:
        return float(sum(float(tf.reduce_sum(f)) for f, _ in dataset))
    total = 0.0
    for features, _ in ctx.strategy.experimental_distribute_dataset(dataset):
        for local in ctx.strategy.experimental_local_results(features):
            total += float(tf.reduce_sum(local))
    return total


seen = seen_by_this_process()

with ctx.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=ctx.optimizer(tf.keras.optimizers.SGD(ctx.scale_lr(0.01))), loss="mse")

history = model.fit(
    dataset, epochs=epochs, callbacks=ctx.callbacks(warmup_epochs=2), verbose=ctx.verbose
)
checkpoint = ctx.checkpoint_dir(out / "ckpt")
model.save_weights(str(checkpoint / "weights.weights.h5"))

out.mkdir(parents=True, exist_ok=True)
report = {
    "mode": ctx.mode.value,
    "rank": ctx.rank,
    "size": ctx.size,
    "local_rank": ctx.local_rank,
    "replicas": ctx.replicas,
    "data_sum": seen,
    "weights": [w.tolist() for w in model.get_weights()],
    "history": {k: [float(v) for v in vs] for k, vs in history.history.items()},
    "tf_config": json.loads(os.environ.get("TF_CONFIG", "null")),
    "checkpoint": str(checkpoint),
    "slurm_procid": os.environ.get("SLURM_PROCID"),
    "proxies": {k: v for k, v in os.environ.items() if k.lower().endswith("proxy")},
    "python": sys.executable,
    "tensorflow": tf.__file__,
}
(out / f"rank{ctx.rank}.json").write_text(json.dumps(report))
