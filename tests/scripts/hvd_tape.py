"""Horovod with a custom training loop, as in Horovod's TensorFlow 2 example; nothing from ctrain.

    python hvd_tape.py

tf.GradientTape wrapped in hvd.DistributedGradientTape, a tf.function step, rank 0's variables
broadcast after the first step. Each rank prints one line `RESULT {json}` with a digest of its
final weights.
"""

import hashlib
import json

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

hvd.init()

rng = np.random.default_rng(hvd.rank())
x = rng.normal(size=(320, 8)).astype("float32")
y = (x @ np.arange(1, 9, dtype="float32") + 0.5).reshape(-1, 1)
dataset = (
    tf.data.Dataset.from_tensor_slices((x, y)).repeat().shuffle(320, seed=hvd.rank()).batch(32)
)

model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(8,)),
        tf.keras.layers.Dense(4, activation="relu"),
        tf.keras.layers.Dense(1),
    ]
)
loss_fn = tf.keras.losses.MeanSquaredError()
opt = tf.keras.optimizers.SGD(0.01 * hvd.size())


@tf.function
def training_step(features, labels, first_batch):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(features, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    # After the first step, so that the optimizer's variables exist.
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(opt.variables(), root_rank=0)
    return loss


losses = []
for step, (features, labels) in enumerate(dataset.take(24 // hvd.size())):
    loss = training_step(features, labels, step == 0)
    losses.append(float(hvd.allreduce(loss)))
    if step % 4 == 0 and hvd.rank() == 0:
        print(f"step {step}: loss {losses[-1]:.4f}")

weights = model.get_weights()
result = {
    "rank": hvd.rank(),
    "size": hvd.size(),
    "digest": hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest(),
    "loss": losses,
}
print("RESULT " + json.dumps(result), flush=True)
