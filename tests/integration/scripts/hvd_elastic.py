"""Horovod's elastic Keras API through a real membership change, under
`horovodrun --host-discovery-script`: rank 0 rewrites the hosts file (HOSTS) from 2 slots to 1
after epoch 2, Horovod removes rank 1, and the survivor resumes from the last committed state.

    python hvd_elastic.py HOSTS EPOCHS

Each start of the training function prints `START {json}`, the end `RESULT {json}`.
"""

import json
import sys
import time

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

hosts, epochs = sys.argv[1], int(sys.argv[2])
hvd.init()
x = np.random.default_rng(hvd.rank()).normal(size=(256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)), loss="mse")
state = hvd.elastic.KerasState(model, batch=0, epoch=0)


class ShrinkAfterEpoch2(tf.keras.callbacks.Callback):
    """Rank 0 asks for one slot after epoch 2; each step takes a while, so that Horovod's host
    discovery (every second) sees the change long before the last epoch."""

    def on_epoch_end(self, epoch, logs=None):
        if state.epoch == 2 and hvd.rank() == 0:
            with open(hosts, "w") as f:
                f.write("localhost:1\n")

    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)


callbacks = [
    hvd.elastic.CommitStateCallback(state, batches_per_commit=4),
    hvd.elastic.UpdateBatchStateCallback(state),
    hvd.elastic.UpdateEpochStateCallback(state),
    hvd.callbacks.MetricAverageCallback(),
    ShrinkAfterEpoch2(),
]


@hvd.elastic.run
def train(state):
    start = {"rank": hvd.rank(), "size": hvd.size(), "epoch": state.epoch, "batch": state.batch}
    print("START " + json.dumps(start), flush=True)
    model.fit(
        x,
        y,
        batch_size=16,
        steps_per_epoch=16,
        epochs=epochs - state.epoch,
        callbacks=callbacks,
        verbose=0,
    )


train(state)
print("RESULT " + json.dumps({"rank": hvd.rank(), "size": hvd.size(), "epoch": state.epoch}))
