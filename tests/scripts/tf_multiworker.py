"""TensorFlow's multi-worker Keras tutorial, shortened: reads TF_CONFIG, builds
MultiWorkerMirroredStrategy itself, saves the model from the chief only; nothing from ctrain.

    python tf_multiworker.py OUT_DIR

Each worker prints one line `RESULT {json}` with a digest of its final weights.
"""

import hashlib
import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

out = sys.argv[1]
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])
task_index = tf_config["task"]["index"]

per_worker_batch_size = 16
global_batch_size = per_worker_batch_size * num_workers


def make_dataset(batch_size):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = (x @ np.arange(1, 9, dtype="float32") + 0.5).reshape(-1, 1)
    return (
        tf.data.Dataset.from_tensor_slices((x, y)).shuffle(512, seed=0).repeat().batch(batch_size)
    )


def build_and_compile_model():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(8,)),
            tf.keras.layers.Dense(4, activation="relu"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(
        loss="mse", optimizer=tf.keras.optimizers.SGD(learning_rate=0.01), metrics=["mae"]
    )
    return model


strategy = tf.distribute.MultiWorkerMirroredStrategy()
multi_worker_dataset = make_dataset(global_batch_size)
with strategy.scope():
    multi_worker_model = build_and_compile_model()

history = multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=10, verbose=2)


# The tutorial's saving: the chief writes to the real path, the other workers to a temporary one.
def _is_chief(task_type, task_id):
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


task_type, task_id = strategy.cluster_resolver.task_type, strategy.cluster_resolver.task_id
if _is_chief(task_type, task_id):
    write_model_path = os.path.join(out, "model.keras")
else:
    write_model_path = os.path.join(tempfile.mkdtemp(), "model.keras")
multi_worker_model.save(write_model_path)

weights = multi_worker_model.get_weights()
result = {
    "rank": task_index,
    "size": num_workers,
    "replicas": strategy.num_replicas_in_sync,
    "digest": hashlib.sha256(b"".join(w.tobytes() for w in weights)).hexdigest(),
    "loss": [float(v) for v in history.history["loss"]],
    "saved": write_model_path,
}
print("RESULT " + json.dumps(result), flush=True)
