"""Write checkpoints of a real Keras model until killed, for the SIGKILL test.

    python ckpt_writer.py DIR loop [POINT EPOCH]  # epochs N+1, N+2, ... as fast as it can, from
                                                  # the latest complete checkpoint N; with POINT,
                                                  # stops at that point of the write of EPOCH,
                                                  # prints "paused POINT EPOCH" and hangs
    python ckpt_writer.py DIR check               # prints the latest checkpoint and whether its
                                                  # weights load and match what was saved

The points of a write, in order (seen from inside the writer, by a Python audit hook):
"state" (the temporary directory made, nothing in it), "manifest" (the state written, not the
manifest), "rename" (all written, not yet renamed into place), "cleanup" (renamed, an older
checkpoint about to be removed; from the 4th checkpoint on, as 3 are kept).

The model's weights at epoch N are all N (so a loaded checkpoint tells which epoch it holds).
"""

import json
import os
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


pause_point, pause_epoch = (sys.argv[3], int(sys.argv[4])) if len(sys.argv) > 4 else ("", 0)
writing = [0]  # the epoch being written


def pause(point: str) -> None:
    if point == pause_point and writing[0] == pause_epoch:
        print(f"paused {point} {pause_epoch}", flush=True)
        time.sleep(600)  # until the test kills this process


def pause_at_points(event: str, args: tuple) -> None:
    if not args or not isinstance(args[0], (str, os.PathLike)):
        return
    path = Path(args[0])
    writes = event == "open" and isinstance(args[2], int) and args[2] & os.O_CREAT
    if writes and path.name == checkpoints.MANIFEST:
        pause("manifest")
    elif event == "os.rename" and Path(args[1]).name == checkpoints.checkpoint_name(writing[0], 0):
        pause("rename")
    elif event == "shutil.rmtree" and path.name.startswith("ckpt-"):
        pause("cleanup")


def save(epoch: int) -> None:
    set_epoch(epoch)
    writing[0] = epoch

    def write_state(prefix: Path) -> None:
        pause("state")
        state.write(str(prefix))

    checkpoints.write(directory, epoch, 0, fingerprint, write_state, keep=3)


if pause_point:
    sys.addaudithook(pause_at_points)
if action == "loop":  # goes on from the latest complete checkpoint, as a resumed run does
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
