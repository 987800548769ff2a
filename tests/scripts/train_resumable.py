"""A tiny model trained through ctrain's API with checkpoints, stop-on-signal and resume.

    python train_resumable.py OUT_DIR EPOCHS [--signal-at EPOCH:STEP [--signal-rank R]]
                              [--hold-at EPOCH:STEP ...]
                              [--units N] [--config-tag TAG] [--no-preemption]
                              [--stall-at EPOCH:STEP --stall-rank R] [--slow-rank R --slow S]

Every run (every restart) appends one line per rank to OUT_DIR/runs.jsonl: the restart count,
where it started (epoch, step), how it ended, its Python and the image file Apptainer runs it
in (if any). Each completed epoch appends a line to
OUT_DIR/epochs.jsonl (the chief). At the end each rank writes OUT_DIR/final-rank<R>.json with
its weights. ``--signal-at`` sends this process SIGUSR2 before that step (0-based), as Slurm
would before the time limit. ``--hold-at`` (once per run: the first for run 0, the second for
run 1, ...) stops each rank before that step, writes OUT_DIR/held-run<N>-rank<R>, and waits
there for SIGUSR2 or SIGTERM from outside (the test, or Slurm itself): the run then stops after
that step; the marker holds the rank's process id. ``--no-preemption`` leaves out ``ctx.resume``
and the preemption callbacks (a script that never asked ctrain to stop it cleanly: a signal ends
it, and a held rank waits for one). ``--stall-at`` stops rank R (SIGSTOP to itself, as a node
swapping to death) before that step and writes OUT_DIR/stalled-rank<R> first; ``--slow`` makes
rank R sleep S seconds after each of its steps (a slow rank that still progresses).
Every write, rename or removal this rank makes under OUT_DIR/ckpt (seen by a Python audit
hook) is appended to OUT_DIR/ckpt-writes-rank<R>.jsonl: the proof that only the chief writes
the shared checkpoint directory.
"""

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

import ctrain.distributed

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402  (after init: TF_USE_LEGACY_KERAS is set by then)

from ctrain.train.preemption import STOP  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("epochs", type=int)
parser.add_argument("--signal-at", default="")
parser.add_argument("--signal-rank", type=int, default=None, help="only this rank signals")
parser.add_argument("--hold-at", action="append", default=[], help="one per run")
parser.add_argument("--units", type=int, default=8)
parser.add_argument("--config-tag", default="a")
parser.add_argument("--no-preemption", action="store_true")
parser.add_argument("--stall-at", default="")
parser.add_argument("--stall-rank", type=int, default=1)
parser.add_argument("--slow-rank", type=int, default=None)
parser.add_argument("--slow", type=float, default=0.0)
args = parser.parse_args()
out: Path = args.out
out.mkdir(parents=True, exist_ok=True)
restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
checkpoints = Path(os.path.abspath(out / "ckpt"))
WRITES = ("open", "os.mkdir", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree")


def record_checkpoint_writes(event: str, event_args: tuple) -> None:
    if event not in WRITES or not event_args or not isinstance(event_args[0], (str, Path)):
        return
    flags = event_args[2] if event == "open" else os.O_WRONLY
    if not (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)):
        return  # reading
    named = event_args[:2] if event == "os.rename" else event_args[:1]
    paths = [Path(os.path.abspath(p)) for p in named if isinstance(p, (str, Path))]
    if any(p == checkpoints or checkpoints in p.parents for p in paths):
        with (out / f"ckpt-writes-rank{ctx.rank}.jsonl").open("a") as f:
            f.write(json.dumps({"event": event, "path": str(paths[0]), "pid": os.getpid()}) + "\n")


sys.addaudithook(record_checkpoint_writes)

tf.keras.utils.set_random_seed(1234)
tf.config.experimental.enable_op_determinism()
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 8)).astype("float32")
y = (np.sin(x @ np.arange(1, 9, dtype="float32") / 8) + 0.5).reshape(-1, 1)
data = ctx.shard(tf.data.Dataset.from_tensor_slices((x, y)))
# The same order every epoch and after every restart: what exact resumption needs.
data = data.shuffle(512, seed=7, reshuffle_each_iteration=False)
data = data.batch(ctx.batch_size(16), drop_remainder=True)

config = {"units": args.units, "tag": args.config_tag, "lr": 0.01}
with ctx.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(8,)),
            tf.keras.layers.Dense(args.units, activation="tanh"),
            tf.keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=ctx.optimizer(tf.keras.optimizers.Adam(0.01)), loss="mse")

initial_epoch = 0 if args.no_preemption else ctx.resume(model, checkpoints, config=config)
resumed = ctx._preemption.get("resumed", (0, 0))


def hold_until_signalled(timeout: float = 600) -> None:
    """Tell the test this rank is held (a marker file), then wait for the stop signal."""
    marker = out / f"held-run{restart}-rank{ctx.rank}"
    marker.with_suffix(".tmp").write_text(str(os.getpid()))
    marker.with_suffix(".tmp").rename(marker)  # whole when seen
    deadline = time.monotonic() + timeout
    while not STOP.requested:
        if time.monotonic() > deadline:
            sys.exit(f"rank {ctx.rank}: no stop signal within {timeout} s of the hold")
        time.sleep(0.05)


class Record(tf.keras.callbacks.Callback):
    """Writes progress for the test; sends the signal; holds a step until the signal comes."""

    def __init__(self) -> None:
        super().__init__()
        at = args.signal_at
        self.signal_at = tuple(int(v) for v in at.split(":")) if at else None
        holds = [tuple(int(v) for v in h.split(":")) for h in args.hold_at]
        self.stall_at = tuple(int(v) for v in args.stall_at.split(":")) if args.stall_at else None
        self.hold_at = holds[restart] if restart < len(holds) else None
        self.epoch = 0
        self.batches = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        self.batches = batch + 1
        mine = args.signal_rank is None or args.signal_rank == ctx.rank
        if (self.epoch, batch) == self.signal_at and mine:
            os.kill(os.getpid(), signal.SIGUSR2)
        if (self.epoch, batch) == self.hold_at:
            hold_until_signalled()
        if (self.epoch, batch) == self.stall_at and ctx.rank == args.stall_rank:
            (out / f"stalled-rank{ctx.rank}").write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)

    def on_train_batch_end(self, batch, logs=None):
        if ctx.rank == args.slow_rank:
            time.sleep(args.slow)

    def on_epoch_end(self, epoch, logs=None):
        whole = self.batches == self.params["steps"]  # not cut short by the signal
        if ctx.is_chief and whole:
            with (out / "epochs.jsonl").open("a") as f:
                f.write(json.dumps({"epoch": epoch, "restart": restart}) + "\n")


def record_run(end: str) -> None:
    with (out / "runs.jsonl").open("a") as f:
        line = {
            "restart": restart,
            "rank": ctx.rank,
            "mode": ctx.mode.value,
            "start": list(resumed),
            "end": end,
            "job": os.environ.get("SLURM_JOB_ID"),
            "python": sys.executable,
            "container": os.environ.get("APPTAINER_CONTAINER"),  # the image file Apptainer runs
        }
        f.write(json.dumps(line) + "\n")


callbacks = [*ctx.callbacks(), Record()]
if not args.no_preemption:
    callbacks += ctx.preemption_callbacks(checkpoints, config=config)
try:
    model.fit(
        data,
        epochs=args.epochs,
        initial_epoch=initial_epoch,
        callbacks=callbacks,
        verbose=2 if ctx.verbose else 0,
    )
except SystemExit as stop:
    record_run(f"exit {stop.code}")
    raise
record_run("done")
report = {"rank": ctx.rank, "weights": [w.tolist() for w in model.get_weights()]}
(out / f"final-rank{ctx.rank}.json").write_text(json.dumps(report))
