"""Write checkpoints of a real Keras model until killed, for the SIGKILL test.

    python ckpt_writer.py DIR write-and-hang    # epoch 1 whole; epoch 2 written, then hangs
                                                # before its rename (prints "writing" first)
    python ckpt_writer.py DIR loop              # epochs N+1, N+2, ... as fast as it can, from
                                                # the latest complete checkpoint N
    python ckpt_writer.py DIR check             # prints the latest checkpoint and whether its
                                                # weights load and match what was saved

The model's weights at epoch N are all N (so a loaded checkpoint tells which epoch it holds).
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

import ctrain.distributed

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402

from ctrain.train import checkpoints  # noqa: E402

directory, action = Path(sys.argv[1]), sys.argv[2]
model = tf.keras.Sequential(
    [tf.keras.Input(shape=(64,)), tf.keras.layers.Dense(256), tf.keras.layers.Dense(64)]
)
model.compile(optimizer=tf.keras.optimizers.Adam(0.001), loss="mse")
model.optimizer.build(model.trainable_variables)
fingerprint = checkpoints.fingerprint(checkpoints.describe_model(model))
state = tf.train.Checkpoint(model=model, optimizer=model.optimizer)


def set_epoch(epoch: int) -> None:
    model.set_weights([np.full(w.shape, epoch, dtype=w.dtype) for w in model.get_weights()])


def save(epoch: int, hang: bool = False) -> None:
    set_epoch(epoch)

    def write_state(prefix: Path) -> None:
        state.write(str(prefix))
        if hang:  # the state is on disk under the temporary name; the rename has not happened
            print("writing", flush=True)
            time.sleep(600)

    checkpoints.write(directory, epoch, 0, fingerprint, write_state, keep=3)


if action == "write-and-hang":
    save(1)
    save(2, hang=True)
elif action == "loop":  # goes on from the latest complete checkpoint, as a resumed run does
    found = checkpoints.latest(directory)
    epoch = found.manifest.epoch if found else 0
    while True:
        epoch += 1
        save(epoch)
        print(f"saved {epoch}", flush=True)
elif action == "check":
    found = checkpoints.latest(directory)
    if found is None:
        print(json.dumps({"epoch": None}))
        sys.exit(0)
    checkpoints.check(found, fingerprint)
    set_epoch(-1)
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(
        str(found.state)
    ).assert_existing_objects_matched()
    values = {float(v) for w in model.get_weights() for v in np.unique(w)}
    print(json.dumps({"epoch": found.manifest.epoch, "values": sorted(values)}))
