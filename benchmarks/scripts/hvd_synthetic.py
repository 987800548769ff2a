"""Horovod's Keras synthetic benchmark as users write it: horovod.tensorflow.keras, nothing
from ctrain (benchmarks/scripts_vs_api.py runs it against `python -m ctrain.bench.synthetic`).

    python hvd_synthetic.py [--model M] [--image-size N] [--batch-size B] [--classes C]
                            [--num-batches-per-iter K] [--num-iters I]

The same model, data and optimizer as ctrain's benchmark: random images, a Keras application,
plain SGD with the learning rate scaled by the ranks, hvd.DistributedOptimizer,
hvd.callbacks to broadcast rank 0's weights and average the metrics. One epoch of K batches
per iteration, the first one a warm-up left out. Rank 0 prints `RESULT {json}`.
"""

import argparse
import json
import time

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="MobileNetV2")
parser.add_argument("--image-size", type=int, default=64)
parser.add_argument("--batch-size", type=int, default=32, help="per rank")
parser.add_argument("--classes", type=int, default=10)
parser.add_argument("--num-batches-per-iter", type=int, default=5)
parser.add_argument("--num-iters", type=int, default=4)
args = parser.parse_args()

hvd.init()
tf.keras.utils.set_random_seed(42)

rng = np.random.default_rng(hvd.rank())
size = args.image_size
images = rng.random((args.batch_size, size, size, 3), dtype=np.float32)
labels = rng.integers(0, args.classes, size=args.batch_size)
data = tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
data = data.batch(args.batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

model = getattr(tf.keras.applications, args.model)(
    weights=None, input_shape=(size, size, 3), classes=args.classes
)
opt = tf.keras.optimizers.SGD(0.01 * hvd.size())
model.compile(
    optimizer=hvd.DistributedOptimizer(opt),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(),
)


class Timing(tf.keras.callbacks.Callback):
    """Images/second per rank of each epoch after the first (the warm-up)."""

    def __init__(self):
        super().__init__()
        self.rates, self.began = [], 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if epoch > 0:
            seconds = time.perf_counter() - self.began
            self.rates.append(args.batch_size * args.num_batches_per_iter / seconds)


timing = Timing()
callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    timing,
]
model.fit(
    data,
    steps_per_epoch=args.num_batches_per_iter,
    epochs=1 + args.num_iters,
    callbacks=callbacks,
    verbose=0,
)
if hvd.rank() == 0:
    per_worker = sum(timing.rates) / len(timing.rates)
    result = {"workers": hvd.size(), "rates": timing.rates, "total": per_worker * hvd.size()}
    print("RESULT " + json.dumps(result), flush=True)
