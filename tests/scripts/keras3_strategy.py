"""A Keras 3 script as users write it: `import keras`, tf.distribute, nothing from ctrain.

    python keras3_strategy.py OUT_DIR [STEPS_PER_EXECUTION]

MultiWorkerMirroredStrategy when TF_CONFIG names a cluster (the TensorFlow tutorial's way),
MirroredStrategy otherwise. Every worker builds the same dataset and keeps its part of each
global batch (auto-sharding by data), so a run on N workers takes the same steps as one process
with the same global batch. fit with validation data, evaluate, predict; the chief saves the
model and reloads it. Each worker prints one line `RESULT {json}` with its final weights.
"""

import json
import os
import sys

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 64
out = sys.argv[1]
steps_per_execution = int(sys.argv[2]) if len(sys.argv) > 2 else 1

tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
if tf_config.get("cluster"):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = tf_config["task"]["index"]
else:
    strategy = tf.distribute.MirroredStrategy()
    task = 0

rng = np.random.default_rng(42)
x = rng.normal(size=(512, 8)).astype("float32")
y = (x @ np.linspace(-1, 1, 8, dtype="float32") + 0.3).reshape(-1, 1)

options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
train = tf.data.Dataset.from_tensor_slices((x[:448], y[:448])).batch(GLOBAL_BATCH)
valid = tf.data.Dataset.from_tensor_slices((x[448:], y[448:])).batch(GLOBAL_BATCH)
train, valid = train.with_options(options), valid.with_options(options)

with strategy.scope():
    keras.utils.set_random_seed(7)
    model = keras.Sequential(
        [keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
        loss="mse",
        metrics=["mae"],
        steps_per_execution=steps_per_execution,
    )

history = model.fit(train, validation_data=valid, epochs=3, verbose=2 if task == 0 else 0)
evaluated = model.evaluate(valid, verbose=0, return_dict=True)
predicted = model.predict(x[:8], verbose=0)

restored_same = None
if task == 0:
    model.save(f"{out}/model.keras")
    restored = keras.models.load_model(f"{out}/model.keras")
    restored_same = all(
        np.array_equal(a, b)
        for a, b in zip(model.get_weights(), restored.get_weights(), strict=True)
    )

result = {
    "task": task,
    "replicas": strategy.num_replicas_in_sync,
    "keras": keras.__version__,
    "weights": [float(v) for w in model.get_weights() for v in w.ravel()],
    "loss": [float(v) for v in history.history["loss"]],
    "val_loss": [float(v) for v in history.history["val_loss"]],
    "evaluated": float(evaluated["loss"]),
    "predicted": [float(v) for v in predicted.ravel()],
    "restored_same": restored_same,
}
print("RESULT " + json.dumps(result), flush=True)
