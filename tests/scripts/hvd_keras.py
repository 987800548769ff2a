"""Horovod's Keras API as its documentation shows it; nothing from ctrain.

    python hvd_keras.py OUT_DIR

hvd.DistributedOptimizer around SGD with momentum, rank 0's initial weights broadcast, metrics
averaged, a learning-rate warm-up; rank 0 saves the model and every rank loads it back with
hvd.load_model. Each rank prints one line `RESULT {json}` with a digest of its final weights.
"""

import hashlib
import json
import sys

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

hvd.init()
out = sys.argv[1]

# each rank its own samples of the same function
rng = np.random.default_rng(hvd.rank())
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ np.arange(1, 9, dtype="float32") + 0.5).reshape(-1, 1)

model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(8,)),
        tf.keras.layers.Dense(4, activation="relu"),
        tf.keras.layers.Dense(1),
    ]
)
opt = tf.keras.optimizers.SGD(learning_rate=0.01 * hvd.size(), momentum=0.9)
model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="mse", metrics=["mae"])

callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(
        initial_lr=0.01 * hvd.size(), warmup_epochs=2, momentum_correction=False, verbose=1
    ),
]
history = model.fit(
    x, y, batch_size=32, epochs=3, callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0
)

if hvd.rank() == 0:
    model.save(f"{out}/model.keras")
hvd.allreduce(tf.constant(0.0), name="saved")  # every rank waits for the file
restored = hvd.load_model(f"{out}/model.keras")
same = all(
    np.array_equal(a, b) for a, b in zip(model.get_weights(), restored.get_weights(), strict=True)
)

weights = model.get_weights()
result = {
    "rank": hvd.rank(),
    "size": hvd.size(),
    "digest": hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest(),
    "loss": [float(v) for v in history.history["loss"]],
    "lr": [float(v) for v in history.history["lr"]],
    "restored_same": same,
    "restored_distributed": hasattr(restored.optimizer, "_allreduce_grads"),
}
print("RESULT " + json.dumps(result), flush=True)
