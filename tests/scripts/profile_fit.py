"""A Keras ``fit`` script as users write them, nothing from ctrain, for ``--profile``'s tests.

    python profile_fit.py input|compute|comm [single|mirrored|multiworker|horovod]

input: every batch waits 30 ms in a ``tf.py_function`` (an input-bound run); comm: two
2048-wide dense layers on batches of 4 (communication-bound with several workers on 2 cores);
compute: the same layers without the waiting. The strategy is the script's own, as in
TensorFlow's and Horovod's tutorials. ``tf.keras`` follows TF_USE_LEGACY_KERAS (tf-keras or
Keras 3). Trains 2 epochs of 8 steps and prints ``RESULT {json}`` per rank.
"""

import contextlib
import json
import sys
import time

import tensorflow as tf

bound = sys.argv[1]
strategy_name = sys.argv[2] if len(sys.argv) > 2 else "single"
rank = 0
if strategy_name == "horovod":
    import horovod.tensorflow.keras as hvd

    hvd.init()
    rank = hvd.rank()
strategies = {
    "mirrored": tf.distribute.MirroredStrategy,
    "multiworker": tf.distribute.MultiWorkerMirroredStrategy,
}
strategy = strategies[strategy_name]() if strategy_name in strategies else None
if strategy_name == "multiworker":
    rank = strategy.cluster_resolver.task_id


def slow(features, labels):
    time.sleep(0.03)
    return features, labels


def shaped(features, labels):
    features.set_shape((None, 256))
    labels.set_shape((None,))
    return features, labels


x = tf.random.stateless_normal((256, 256), seed=(1, 2))
y = tf.random.stateless_uniform((256,), seed=(3, 4), maxval=10, dtype=tf.int32)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(4)
if bound == "input":
    dataset = dataset.map(lambda a, b: tf.py_function(slow, [a, b], [tf.float32, tf.int32]))
    dataset = dataset.map(shaped)
width = 64 if bound == "input" else 2048

with strategy.scope() if strategy else contextlib.nullcontext():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(256,)),
            tf.keras.layers.Dense(width, activation="relu"),
            tf.keras.layers.Dense(width, activation="relu"),
            tf.keras.layers.Dense(10),
        ]
    )
    optimizer = tf.keras.optimizers.SGD(0.001)
    if strategy_name == "horovod":
        optimizer = hvd.DistributedOptimizer(optimizer)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss)
callbacks = []
if strategy_name == "horovod":
    callbacks.append(hvd.callbacks.BroadcastGlobalVariablesCallback(0))
history = model.fit(dataset, steps_per_epoch=8, epochs=2, callbacks=callbacks, verbose=0)
print("RESULT " + json.dumps({"rank": rank, "loss": history.history["loss"]}), flush=True)
