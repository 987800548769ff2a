"""Surviving the time limit and preemption: stop on a signal, checkpoint, requeue, resume.

The job scripts in jobs/ ask Slurm for SIGUSR2 some minutes before the time limit and forward it
to every rank; Slurm sends SIGTERM to every rank when it ends a job otherwise (scancel,
requeue, preemption). Here, on every rank:

- a handler records the signal (nothing else happens in the handler; ``stopping``: SIGTERM's
  budget, and a second SIGTERM or a SIGINT that ends the process at once);
- at the end of each training step all ranks agree whether any of them got it (a sum over
  ranks: Horovod's allreduce, or the MultiWorkerMirroredStrategy's own), so they all stop after
  the same step;
- the checkpoint is written atomically (``ctrain.train.checkpoints``): by the chief, and in
  multiworker also by the other workers into private scratch (TensorFlow needs every worker to
  take part in a save);
- after a last barrier every rank exits with ``REQUEUE_EXIT_CODE``, which the job script turns
  into ``scontrol requeue``.

On the restart ``resume`` loads the latest complete checkpoint (refusing one from another model
or configuration) and returns the epoch to give ``fit(initial_epoch=...)``. When training
stopped in the middle of an epoch, the first steps of that epoch are skipped without training
(their batches are read and dropped), so the resumed run sees exactly the batches the
uninterrupted run would have seen: with the same data order per epoch the final weights are the
same.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

import tensorflow as tf

from ctrain.errors import REQUEUE_EXIT_CODE, CheckpointError
from ctrain.names import Mode
from ctrain.settings import resolve
from ctrain.train import checkpoints
from ctrain.train.stopping import STOP as STOP

Callback = tf.keras.callbacks.Callback


def install() -> None:
    """Record SIGUSR2 and SIGTERM instead of dying of them, with the budget the settings give
    (main thread only; safe to repeat, and repeated where TensorFlow may have taken SIGTERM)."""
    budget = resolve({}, os.environ, Path.cwd()).stop_budget
    STOP.install(budget)


def agree(ctx: Any, local: bool, name: str = "ctrain.stop") -> bool:
    """True on every rank when ``local`` is true on any rank. A collective: every rank of a
    multiworker or Horovod run must call it at the same point."""
    value = tf.constant(1 if local else 0, dtype=tf.int32)
    if ctx.hvd is not None:
        import horovod.tensorflow as hvd_tf

        return int(hvd_tf.allreduce(value, op=hvd_tf.Sum, name=name)) > 0
    if ctx.mode is Mode.MULTIWORKER:
        total = ctx._preemption.get("sum")
        if total is None:  # one traced function: eager collectives cost more than a step
            strategy = ctx.strategy

            @tf.function  # type: ignore[untyped-decorator]
            def total(v: Any) -> Any:
                per_replica = strategy.run(tf.identity, args=(v,))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            ctx._preemption["sum"] = total
        return int(total(value)) > 0
    return local


def _why(exc: BaseException) -> str:
    """What the system said, without TensorFlow's op names: ``No space left on device``."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(getattr(exc, "message", exc)).strip().splitlines()
    said = re.search(r";\s*([^;]+?)\s*\[Op:\w+\]", text[0]) if text else None
    return said[1] if said else (text[0] if text else type(exc).__name__)


def _learning_rate(optimizer: Any) -> Any:
    return getattr(optimizer, "_learning_rate", None)


def _skip_first_steps(model: Any, count: int) -> None:
    """Make the next ``fit`` read and drop its first ``count`` batches instead of training on
    them (Keras still counts them, so callbacks see the right step numbers)."""
    original = model.make_train_function
    remaining = [count]

    def make_train_function(force: bool = False) -> Any:
        function = original(force=force)
        if remaining[0] <= 0:
            return function
        per_execution = int(model._steps_per_execution.numpy()) if model._steps_per_execution else 1
        if per_execution != 1:
            raise CheckpointError(
                "resuming in the middle of an epoch needs steps_per_execution=1",
                "compile the model without steps_per_execution",
            )

        def train_function(iterator: Any) -> Any:
            if remaining[0] > 0:
                remaining[0] -= 1
                next(iterator)
                return {}
            return function(iterator)

        return train_function

    model.make_train_function = make_train_function


def resume(
    ctx: Any,
    model: Any,
    path: str | os.PathLike[str],
    config: Mapping[str, Any] | None = None,
    restore_lr: bool = False,
) -> tuple[int, int, Path | None]:
    """Load the newest checkpoint under ``path`` that loads into ``model`` and its optimizer.

    One passed over (damaged, or unreadable by TensorFlow) is named in a warning with the one
    used; where none loads, a CheckpointError names each with why (never a silent start over).
    Returns (epoch, step, checkpoint): the epoch to start ``fit`` at, the steps of it already
    done, and the checkpoint loaded (None, and (0, 0), when there is none).
    """
    install()
    if getattr(model, "optimizer", None) is None or not model.built:
        raise CheckpointError(
            "ctx.resume needs a built and compiled model",
            "build the model (give it an Input) and call model.compile before ctx.resume",
        )
    found = checkpoints.scan(path)
    if not found.whole and not found.broken:
        return 0, 0, None
    expected = checkpoints.fingerprint(checkpoints.describe_model(model), config)
    optimizer = model.optimizer
    if hasattr(optimizer, "build"):  # slot variables exist before the restore fills them
        with ctx.scope():
            optimizer.build(model.trainable_variables)
    lr = _learning_rate(optimizer)
    kept = lr.numpy() if hasattr(lr, "assign") and not restore_lr else None
    failed: list[tuple[Path, str]] = []
    latest = None
    for candidate in reversed(found.whole):  # the newest that loads
        checkpoints.check(candidate, expected)
        try:
            status = tf.train.Checkpoint(model=model, optimizer=optimizer).read(
                str(candidate.state)
            )
            status.assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError) as exc:
            failed.append((candidate.path, _why(exc)))
            continue
        latest = candidate
        break
    newer = [(p, why) for p, why in found.broken if latest is None or p > latest.path]
    passed = sorted(failed + newer)
    if latest is None:
        raise checkpoints.none_loadable(Path(path), passed)
    if kept is not None:
        lr.assign(kept)  # the script's rate; warm-up and schedules recompute it from the step
    if ctx.is_chief:
        for broken, why in passed:
            print(checkpoints.passed_over(broken, why, latest.path), file=sys.stderr, flush=True)
    epoch, step = latest.manifest.epoch, latest.manifest.step
    if step > 0:
        _skip_first_steps(model, step)
    if ctx.is_chief:
        where = f"epoch {epoch + 1}, step {step + 1}" if step else f"epoch {epoch + 1}"
        print(f"ctrain: resuming from {latest.path} at {where}", file=sys.stderr, flush=True)
    return epoch, step, latest.path


class Policy(NamedTuple):
    """When the callback checkpoints, how many it keeps, whether it exits, how often the ranks
    agree on the signal (the defaults are ``Distributed.preemption_callbacks``')."""

    every_epochs: int
    keep: int
    exit: bool
    check_every: int


class Preemption(Callback):  # type: ignore[misc,valid-type]
    """Checkpoint every ``every_epochs`` epochs, and on SIGUSR2 or SIGTERM (agreed by all ranks)
    after the current step; then exit with REQUEUE_EXIT_CODE (unless ``exit=False``: read
    ``stopped``).

    Put it after the callbacks whose end-of-training work matters: its exit ends ``fit``.
    """

    def __init__(
        self,
        ctx: Any,
        path: str | os.PathLike[str],
        config: Mapping[str, Any] | None,
        policy: Policy,
    ) -> None:
        super().__init__()
        if min(policy.every_epochs, policy.check_every, policy.keep) < 1:
            raise CheckpointError(
                "every_epochs, check_every and keep must be at least 1", "pass positive values"
            )
        self.ctx = ctx
        self.path = Path(path)
        self.config = dict(config or {})
        self.policy = policy
        self.stopped = False
        self.saved: list[Path] = []
        self._directory: Path | None = None
        self._epoch = 0
        self._done = 0
        self._checks = 0
        install()

    def _writes(self) -> bool:
        """The chief writes; in multiworker every worker takes part (the others in scratch)."""
        return bool(self.ctx.is_chief or self.ctx.mode is Mode.MULTIWORKER)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.fingerprint = checkpoints.fingerprint(
            checkpoints.describe_model(self.model), self.config
        )
        if self._directory is None and self._writes():
            self._directory = self.path if self.ctx.is_chief else self.ctx.checkpoint_dir(self.path)
        self.stopped = False
        self._resumed = self.ctx._preemption.get("resumed", (0, 0))
        install()  # again: a strategy made since may have taken SIGTERM

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch
        self._done = 0

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._done = batch + 1
        if self.stopped:
            return
        epoch, step = self._resumed
        if self._epoch == epoch and self._done <= step:
            return  # a batch skipped on resume: the model is still at `step`
        self._checks += 1
        if self._checks % self.policy.check_every:
            return
        if agree(self.ctx, STOP.requested):
            self.stopped = True
            self.model.stop_training = True

    def _save(self, epoch: int, step: int) -> None:
        if self._directory is None:
            return
        state = tf.train.Checkpoint(model=self.model, optimizer=self.model.optimizer)

        def write_state(prefix: Path) -> None:
            state.write(str(prefix))

        keep = self.policy.keep if self.ctx.is_chief else 1
        info = checkpoints.job_info(os.environ)
        try:
            written = checkpoints.write(
                self._directory, epoch, step, self.fingerprint, write_state, info, keep
            )
        except (OSError, tf.errors.OpError) as exc:  # a full disk, a quota, no permission
            raise checkpoints.unwritten(self._directory, epoch, step, _why(exc)) from None
        if self.ctx.is_chief:
            self.saved.append(written)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        last = self.params.get("epochs")
        if self.stopped:
            steps = self.params.get("steps")
            whole = steps is not None and self._done >= steps
            self._save(*((epoch + 1, 0) if whole else (epoch, self._done)))
            agree(self.ctx, True, name="ctrain.saved")  # nobody exits before the chief wrote
            STOP.saved()
            if whole and epoch + 1 == last:
                self.stopped = False  # that was the last step anyway: done, nothing to requeue
            return
        if (epoch + 1) % self.policy.every_epochs == 0 or epoch + 1 == last:
            self._save(epoch + 1, 0)

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if not (self.stopped and self.policy.exit):
            return
        if self.ctx.is_chief and self.saved:
            print(
                f"ctrain: checkpoint {self.saved[-1]} written; exiting with "
                f"{REQUEUE_EXIT_CODE} to be requeued",
                file=sys.stderr,
                flush=True,
            )
        sys.stdout.flush()
        # Every rank is past the checkpoint. A rank that srun or mpirun terminates while it
        # shuts down (another rank exited first, with the requeue code) must still exit with
        # the requeue code, not die of SIGTERM: ignore it (Python keeps SIG_IGN through its
        # finalization; Slurm's SIGKILL after KillWait still ends a rank that would hang).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(REQUEUE_EXIT_CODE)
