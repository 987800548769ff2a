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
    """Rank 0 asks for one slot after epoch 2; from then on every rank waits at the next step's
    end until Horovod's host discovery has seen the change: the elastic state's own check (a
    broadcast from rank 0, so the ranks poll in lockstep) raises HostsUpdatedInterrupt then."""

    asked = False

    def on_train_begin(self, logs=None):
        self.asked = False  # a restarted (smaller) world does not wait again

    def on_epoch_end(self, epoch, logs=None):
        if state.epoch == 2 and hvd.size() == 2:
            self.asked = True
            if hvd.rank() == 0:
                with open(hosts, "w") as f:
                    f.write("localhost:1\n")

    def on_train_batch_end(self, batch, logs=None):
        deadline = time.monotonic() + 120
        while self.asked:
            state.check_host_updates()
            if time.monotonic() > deadline:
                sys.exit(f"rank {hvd.rank()}: no host update within 120 s of the change")
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
