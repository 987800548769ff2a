"""One rank of a multi-node step: what TensorFlow or Horovod itself says about this process, the
host it runs on, and the weights of a tiny training through ctrain's API.

    python multinode_probe.py OUT_DIR EPOCHS [SCALE]

Each replica trains on batches of 8 at learning rate 0.01 x replicas; SCALE (default 1)
multiplies both, so one process with SCALE=N takes the steps N replicas take together.
Writes OUT_DIR/alive-<R> (its pid) once the first epoch is done, and OUT_DIR/rank<R>.json at the
end; R is the rank as TensorFlow's cluster resolver or Horovod number this process.
"""

import json
import os
import socket
import sys
from pathlib import Path

import numpy as np

import ctrain.distributed

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402  (after init: TF_USE_LEGACY_KERAS is set by then)

out = Path(sys.argv[1])
epochs = int(sys.argv[2])
scale = int(sys.argv[3]) if len(sys.argv) > 3 else 1
out.mkdir(parents=True, exist_ok=True)

if ctx.hvd is not None:
    said = {
        "rank": ctx.hvd.rank(),
        "size": ctx.hvd.size(),
        "local_rank": ctx.hvd.local_rank(),
        "local_size": ctx.hvd.local_size(),
    }
elif ctx.strategy is not None and ctx.strategy.cluster_resolver is not None:
    resolver = ctx.strategy.cluster_resolver
    said = {
        "rank": resolver.task_id,
        "size": ctx.strategy.num_replicas_in_sync,
        "task_type": resolver.task_type,
    }
else:  # one process: nobody to ask
    said = {"rank": 0, "size": 1}


class Alive(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            (out / f"alive-{said['rank']}").write_text(str(os.getpid()))


tf.keras.utils.set_random_seed(1234)
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 8)).astype("float32")
y = (x @ np.arange(1, 9, dtype="float32") + 0.5).reshape(-1, 1)
dataset = ctx.shard(tf.data.Dataset.from_tensor_slices((x, y)))
dataset = dataset.batch(ctx.batch_size(8 * scale), drop_remainder=True)

with ctx.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(1)])
    model.compile(
        optimizer=ctx.optimizer(tf.keras.optimizers.SGD(ctx.scale_lr(0.01 * scale))), loss="mse"
    )

model.fit(dataset, epochs=epochs, callbacks=[*ctx.callbacks(), Alive()], verbose=0)

report = {
    "said": said,
    "host": socket.gethostname(),
    "weights": [w.tolist() for w in model.get_weights()],
    "tf_config": json.loads(os.environ.get("TF_CONFIG", "null")),
    "proxies": {k: v for k, v in os.environ.items() if k.lower().endswith("proxy")},
    "slurm_localid": os.environ.get("SLURM_LOCALID"),
}
(out / f"rank{said['rank']}.json").write_text(json.dumps(report))
