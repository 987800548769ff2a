"""Keras callbacks for multi-replica training, written for tf_keras (TensorFlow 2.18 to 2.21).

Horovod's own Keras callbacks import Keras 3's backend and fail there, so ctrain has its own:
initial-weight broadcast and metric averaging (Horovod), a learning-rate warm-up (any mode),
and the stall watchdog's eyes (any mode: ``ctrain.train.watchdog``).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from ctrain.train.watchdog import Progress, Watchdog

Callback = tf.keras.callbacks.Callback


class BroadcastInitialWeights(Callback):  # type: ignore[misc,valid-type]
    """Every rank starts from rank 0's weights, and takes its optimizer state after step one
    (when the optimizer's slots exist)."""

    def __init__(self, hvd: Any, root_rank: int = 0) -> None:
        super().__init__()
        self.hvd = hvd
        self.root_rank = root_rank
        self.done = False

    def _broadcast(self, variables: list[Any]) -> None:
        import horovod.tensorflow as hvd_tf

        if variables:
            hvd_tf.broadcast_variables(variables, root_rank=self.root_rank)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._broadcast(self.model.variables)

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.done:
            return
        self._broadcast(self.model.variables + list(self.model.optimizer.variables))
        self.done = True


class AverageMetrics(Callback):  # type: ignore[misc,valid-type]
    """Epoch metrics averaged over ranks, so every rank (and its logs) sees the same numbers.
    Put it before callbacks that read the logs (checkpoints, TensorBoard)."""

    def __init__(self, hvd: Any) -> None:
        super().__init__()
        self.hvd = hvd

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        import horovod.tensorflow as hvd_tf

        if not logs:
            return
        for key in sorted(logs):
            value = tf.constant(float(logs[key]), dtype=tf.float64)
            averaged = hvd_tf.allreduce(value, op=hvd_tf.Average, name=f"ctrain.metric.{key}")
            logs[key] = float(averaged.numpy())


def _get_lr(optimizer: Any) -> float:
    return float(tf.keras.backend.get_value(optimizer.learning_rate))


def _set_lr(optimizer: Any, value: float) -> None:
    lr = optimizer.learning_rate
    if hasattr(lr, "assign"):
        lr.assign(value)
    else:
        optimizer.learning_rate = value


class WarmUp(Callback):  # type: ignore[misc,valid-type]
    """Ramp the learning rate linearly from lr/replicas to lr over ``epochs`` epochs (per step),
    as for large-batch training with a linearly scaled rate. Logs the rate as ``lr``."""

    def __init__(self, epochs: float, replicas: int, verbose: bool = False) -> None:
        super().__init__()
        self.epochs = epochs
        self.replicas = replicas
        self.verbose = verbose
        self.target = 0.0
        self.epoch = 0
        self.reached = False

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.target = _get_lr(self.model.optimizer)
        self.reached = False

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epoch = epoch

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        if self.reached:
            return
        steps = self.params.get("steps") or 1
        progress = min(1.0, (self.epoch * steps + batch) / (self.epochs * steps))
        start = self.target / self.replicas
        _set_lr(self.model.optimizer, start + (self.target - start) * progress)
        self.reached = progress == 1.0

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        lr = _get_lr(self.model.optimizer)
        if logs is not None:
            logs["lr"] = lr
        if self.verbose:
            print(f"ctrain: epoch {epoch + 1}: learning rate {lr:.6g}", flush=True)


class WatchProgress(Callback):  # type: ignore[misc,valid-type]
    """Tells the watchdog of every step's and epoch's end while ``fit`` runs (and of its own
    validation steps); nothing is watched outside ``fit``."""

    def __init__(self, timeout: float) -> None:
        super().__init__()
        self.progress = Progress(timeout)
        self.watchdog = Watchdog(self.progress)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.progress.start()
        self.watchdog.start()

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self.progress.stop()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.progress.step()

    def on_test_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.progress.step()

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.progress.step()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.progress.step()
