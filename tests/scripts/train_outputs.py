"""A tiny training that leaves what a user fetches afterwards: the chief's checkpoint and its
TensorBoard files, written through ctrain's API in any mode.

    python train_outputs.py OUT_DIR [EPOCHS]
"""

import sys
from pathlib import Path

import numpy as np

import ctrain.distributed

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402  (after init: TF_USE_LEGACY_KERAS is set by then)

out = Path(sys.argv[1])
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
tf.keras.utils.set_random_seed(1234)
x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = ctx.shard(tf.data.Dataset.from_tensor_slices((x, y)))
dataset = dataset.batch(ctx.batch_size(16), drop_remainder=True)

with ctx.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=ctx.optimizer(tf.keras.optimizers.SGD(0.01)), loss="mse")

board = tf.keras.callbacks.TensorBoard(str(ctx.checkpoint_dir(out / "tensorboard")))
model.fit(dataset, epochs=epochs, callbacks=[*ctx.callbacks(), board], verbose=ctx.verbose)
model.save_weights(str(ctx.checkpoint_dir(out / "ckpt") / "weights.weights.h5"))
print(f"rank {ctx.rank} of {ctx.size} ({ctx.mode.value}): trained {epochs} epochs", flush=True)
