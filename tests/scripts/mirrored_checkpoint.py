"""One process, MirroredStrategy over the devices it finds, ModelCheckpoint and TensorBoard
callbacks; nothing from ctrain.

    python mirrored_checkpoint.py OUT_DIR

Writes OUT_DIR/ckpt/epoch-N.weights.h5 and OUT_DIR/logs, then loads the last checkpoint into a
new model and prints one line `RESULT {json}` with digests of the trained and loaded weights.
"""

import glob
import hashlib
import json
import os
import sys

import numpy as np
import tensorflow as tf

out = sys.argv[1]
strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}")

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ np.arange(1, 9, dtype="float32") + 0.5).reshape(-1, 1)
batch = 32 * strategy.num_replicas_in_sync
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=0).batch(batch)


def make_model():
    return tf.keras.Sequential(
        [
            tf.keras.Input(shape=(8,)),
            tf.keras.layers.Dense(4, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )


with strategy.scope():
    model = make_model()
    model.compile(loss="mse", optimizer=tf.keras.optimizers.Adam(0.01), metrics=["mae"])

callbacks = [
    tf.keras.callbacks.ModelCheckpoint(
        filepath=os.path.join(out, "ckpt", "epoch-{epoch}.weights.h5"), save_weights_only=True
    ),
    tf.keras.callbacks.TensorBoard(log_dir=os.path.join(out, "logs")),
]
history = model.fit(dataset, epochs=3, callbacks=callbacks, verbose=2)


def digest(weights):
    return hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest()


checkpoints = sorted(glob.glob(os.path.join(out, "ckpt", "*.weights.h5")))
restored = make_model()
restored.load_weights(checkpoints[-1])
result = {
    "replicas": strategy.num_replicas_in_sync,
    "digest": digest(model.get_weights()),
    "restored_digest": digest(restored.get_weights()),
    "checkpoints": [os.path.basename(c) for c in checkpoints],
    "event_files": len(
        glob.glob(os.path.join(out, "logs", "**", "events.out.tfevents.*"), recursive=True)
    ),
    "loss": [float(v) for v in history.history["loss"]],
}
print("RESULT " + json.dumps(result), flush=True)
