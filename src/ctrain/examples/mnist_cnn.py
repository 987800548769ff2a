"""An MNIST-style CNN trained through ctrain, unchanged in every mode.

    ctrain launch -- python examples/mnist_cnn.py                      # one process
    srun -n 2 ctrain launch -- python examples/mnist_cnn.py            # multiworker
    srun --mpi=pmix -n 2 ctrain launch --mode horovod -- python examples/mnist_cnn.py

Data: an .npz with x_train, y_train, x_test, y_test (as keras.datasets.mnist saves them) given
with --data, or by default ctrain's embedded synthetic digits (no network needed). The chief
alone writes checkpoints and TensorBoard logs under --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import ctrain.distributed
from ctrain.train.demo_data import synthetic_digits

ctx = ctrain.distributed.init()

import tensorflow as tf  # noqa: E402  (after init, which sets TF_USE_LEGACY_KERAS)


class Throughput(tf.keras.callbacks.Callback):
    """Images per second over all replicas, the first epoch (warm-up) left out."""

    def __init__(self, images_per_step: int) -> None:
        super().__init__()
        self.images_per_step = images_per_step
        self.rates: list[float] = []

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.start, self.steps = time.perf_counter(), 0

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self.steps += 1

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        rate = self.steps * self.images_per_step / (time.perf_counter() - self.start)
        self.rates.append(rate)


def load(path: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    if path:
        with np.load(path) as data:
            return data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    x_train, y_train = synthetic_digits(6000, seed=1)
    x_test, y_test = synthetic_digits(1000, seed=2)
    return x_train, y_train, x_test, y_test


def dataset(x: np.ndarray, y: np.ndarray, per_replica: int, train: bool) -> tf.data.Dataset:
    data = ctx.shard(tf.data.Dataset.from_tensor_slices((x, y)))  # shard before shuffling
    data = data.map(
        lambda image, label: (tf.cast(image, tf.float32) / 255.0, label),
        num_parallel_calls=tf.data.AUTOTUNE,
    ).cache()
    if train:
        data = data.shuffle(4096, seed=42)  # the same seed on every rank
    return data.batch(ctx.batch_size(per_replica), drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help=".npz with x_train, y_train, x_test, y_test")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64, help="per replica")
    parser.add_argument("--lr", type=float, default=0.01, help="for one replica; scaled")
    parser.add_argument("--out", default="runs/mnist", help="checkpoints and logs (chief)")
    args = parser.parse_args()

    tf.keras.utils.set_random_seed(42)
    x_train, y_train, x_test, y_test = load(args.data)
    train = dataset(x_train, y_train, args.batch, train=True)
    test = dataset(x_test, y_test, args.batch, train=False)

    with ctx.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(28, 28, 1)),
                tf.keras.layers.Conv2D(16, 3, activation="relu"),
                tf.keras.layers.MaxPooling2D(),
                tf.keras.layers.Conv2D(32, 3, activation="relu"),
                tf.keras.layers.MaxPooling2D(),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(64, activation="relu"),
                tf.keras.layers.Dense(10),
            ]
        )
        optimizer = tf.keras.optimizers.SGD(ctx.scale_lr(args.lr), momentum=0.9)
        model.compile(
            optimizer=ctx.optimizer(optimizer),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )

    out = Path(args.out)
    throughput = Throughput(ctx.global_batch(args.batch))
    callbacks = [*ctx.callbacks(warmup_epochs=1), throughput]
    checkpoints = ctx.checkpoint_dir(out / "checkpoints")
    callbacks.append(
        tf.keras.callbacks.ModelCheckpoint(
            str(checkpoints / "epoch-{epoch:02d}.weights.h5"), save_weights_only=True
        )
    )
    if ctx.is_chief:
        callbacks.append(tf.keras.callbacks.TensorBoard(str(out / "logs")))
    verbose = 2 if ctx.verbose else 0  # one line per epoch: readable in Slurm's log files
    model.fit(train, epochs=args.epochs, callbacks=callbacks, verbose=verbose)
    loss, accuracy = model.evaluate(test, verbose=0)
    if ctx.is_chief:
        rate = float(np.mean(throughput.rates[1:] or throughput.rates))
        print(
            f"ctrain demo: mode={ctx.mode.value} workers={ctx.size} replicas={ctx.replicas} "
            f"test_accuracy={accuracy:.3f} images_per_second={rate:.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
