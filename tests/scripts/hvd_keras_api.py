"""Horovod's Keras API on TensorFlow + tf-keras in one process: what ctrain's patch set fixes.

    python hvd_keras_api.py OUT_DIR

Prints one line `RESULT {json}`; any failure is an exception (a non-zero exit).
"""

import json
import sys
import warnings

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf
from horovod.tensorflow.keras import callbacks as hvd_callbacks

hvd.init()
out = sys.argv[1]
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
result: dict[str, object] = {
    "backend": hvd.K.__name__,
    "callbacks_backend": hvd_callbacks.K.__name__,
}


def compiled(opt):
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="mse", metrics=["mae"])
    return model


class Momenta(tf.keras.callbacks.Callback):
    """The momentum each step runs with (after the schedule callback's on_batch_begin)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def on_train_batch_begin(self, batch, logs=None):
        self.seen.append(float(tf.keras.backend.get_value(self.model.optimizer.momentum)))


def per_batch_schedule():
    # the learning rate changes every batch: momentum correction has something to correct
    return hvd.callbacks.LearningRateScheduleCallback(
        initial_lr=0.01, multiplier=lambda epoch: 1.0 + epoch, staircase=False, steps_per_epoch=4
    )


# A legacy optimizer's momentum is corrected for each step and restored after it.
model = compiled(tf.keras.optimizers.legacy.SGD(0.01, momentum=0.9))
momenta = Momenta()
history = model.fit(
    x, y, batch_size=16, epochs=2, callbacks=[per_batch_schedule(), momenta], verbose=0
)
result["legacy_momenta"] = momenta.seen
result["legacy_momentum_after"] = float(tf.keras.backend.get_value(model.optimizer.momentum))
result["legacy_lr"] = [float(v) for v in history.history["lr"]]

# A TF >= 2.11 optimizer: the learning rate follows the schedule; momentum correction is
# skipped with one warning.
model = compiled(tf.keras.optimizers.SGD(0.01, momentum=0.9))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    history = model.fit(x, y, batch_size=16, epochs=2, callbacks=[per_batch_schedule()], verbose=0)
result["lr"] = [float(v) for v in history.history["lr"]]
result["momentum_warnings"] = [str(w.message) for w in caught if "momentum" in str(w.message)]

# Warm-up, metric averaging and the broadcast together, as Horovod's examples use them.
model = compiled(tf.keras.optimizers.Adam(0.01))
callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.01, warmup_epochs=1),
]
history = model.fit(x, y, batch_size=16, epochs=2, callbacks=callbacks, verbose=0)
result["warmup_metrics"] = sorted(history.history)

# hvd.load_model: both formats give back a DistributedOptimizer.
loaded = {}
for name in ("model.keras", "model.h5"):
    model.save(f"{out}/{name}")
    restored = hvd.load_model(f"{out}/{name}")
    restored.fit(x, y, batch_size=16, epochs=1, verbose=0)
    loaded[name] = hasattr(restored.optimizer, "_allreduce_grads")
result["load_model"] = loaded

# The elastic Keras callbacks and state, inside hvd.elastic.run.
state = hvd.elastic.KerasState(model, batch=0, epoch=0)
elastic = [
    hvd.elastic.CommitStateCallback(state, batches_per_commit=2),
    hvd.elastic.UpdateBatchStateCallback(state),
    hvd.elastic.UpdateEpochStateCallback(state),
]


@hvd.elastic.run
def train(state):
    model.fit(
        x, y, batch_size=16, steps_per_epoch=4, epochs=3 - state.epoch, callbacks=elastic, verbose=0
    )


train(state)
result["elastic"] = {"epoch": state.epoch, "batch": state.batch}
print("RESULT " + json.dumps(result), flush=True)
