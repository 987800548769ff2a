"""A Keras 3 synthetic benchmark as users write it: `import keras`, MultiWorkerMirroredStrategy
from TF_CONFIG (the TensorFlow tutorial's way), nothing from ctrain
(benchmarks/scripts_vs_api.py runs it against `python -m ctrain.bench.synthetic` on Keras 3).

    python keras3_mwms_synthetic.py [--model M] [--image-size N] [--batch-size B] [--classes C]
                                    [--num-batches-per-iter K] [--num-iters I]

The same model, data and optimizer as ctrain's benchmark: random images, a Keras application,
plain SGD with the learning rate scaled by the workers; every worker builds one global batch
and keeps its part of it (auto-sharding by data). One epoch of K batches per iteration, the
first one a warm-up left out. The chief prints `RESULT {json}`.
"""

import argparse
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="MobileNetV2")
parser.add_argument("--image-size", type=int, default=64)
parser.add_argument("--batch-size", type=int, default=32, help="per worker")
parser.add_argument("--classes", type=int, default=10)
parser.add_argument("--num-batches-per-iter", type=int, default=5)
parser.add_argument("--num-iters", type=int, default=4)
args = parser.parse_args()

tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = tf_config["task"]["index"] if tf_config.get("cluster") else 0
workers = strategy.num_replicas_in_sync
global_batch = args.batch_size * workers

rng = np.random.default_rng(task)
size = args.image_size
images = rng.random((global_batch, size, size, 3), dtype=np.float32)
labels = rng.integers(0, args.classes, size=global_batch)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
data = tf.data.Dataset.from_tensor_slices((images, labels)).with_options(options).repeat()
data = data.batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

with strategy.scope():
    keras.utils.set_random_seed(42)
    model = getattr(keras.applications, args.model)(
        weights=None, input_shape=(size, size, 3), classes=args.classes
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.01 * workers),
        loss=keras.losses.SparseCategoricalCrossentropy(),
    )


class Timing(keras.callbacks.Callback):
    """Images/second per worker of each epoch after the first (the warm-up)."""

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
model.fit(
    data,
    steps_per_epoch=args.num_batches_per_iter,
    epochs=1 + args.num_iters,
    callbacks=[timing],
    verbose=0,
)
if task == 0:
    per_worker = sum(timing.rates) / len(timing.rates)
    result = {"workers": workers, "rates": timing.rates, "total": per_worker * workers}
    print("RESULT " + json.dumps(result), flush=True)
