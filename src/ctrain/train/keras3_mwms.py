"""Keras 3 ``fit``/``evaluate`` under MultiWorkerMirroredStrategy: ctrain's fix.

Keras 3's TensorFlow trainer (``keras/src/backend/tensorflow/trainer.py``, 3.5 to 3.15 at
least; keras-team/keras#20585) fails in multi-worker mode twice, one after the other:

1. ``TensorFlowTrainer._maybe_symbolic_build`` builds the model from the first batch after
   reducing it with ``strategy.reduce("MEAN", batch, axis=None)``. Under MultiWorkerMirrored
   every batch is a PerReplica, so that is a cross-worker collective on a tuple: "Attempt to
   convert a value (PerReplica...) to a Tensor". The build needs shapes only: this worker's
   first-replica batch is enough.
2. ``reduce_per_replica`` reduces the scalar step logs with ``axis=0``: "Invalid reduction
   dimension 0 for input with 0 dimensions". ``axis=None`` is the mean over replicas.

``apply`` replaces each of the two only while the installed Keras still has the faulty line
(so a Keras that fixes it turns ctrain's fix off), and the replacements change nothing unless
the strategy is multi-worker. ``arm`` applies it as soon as the trainer module is imported
(``ctrain.distributed.init`` calls it, and ``ctrain launch``'s start-up hook for scripts that
do not use ctrain's API). Below Keras 3.5 the gradients are not all-reduced: refused.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any, NoReturn

from ctrain.errors import CtrainError, LaunchError
from ctrain.launch.keras import LEGACY_KERAS, tf_keras_chosen
from ctrain.names import ENV_LAUNCH_MODE, Mode
from ctrain.train.after_import import when_imported

TRAINER = "keras.src.backend.tensorflow.trainer"
MIN_VERSION = (3, 5)
# The faulty lines and the loop the replacement relies on, without white space.
BUGGY_BUILD = 'self.distribute_strategy.reduce("MEAN",maybe_distributed_data_batch,axis=None,)'
BUILD_LOOP = "for_,_,itiniterator:"
BUGGY_REDUCE = 'returnstrategy.reduce("MEAN",v,axis=0)'


def _squashed(source: str) -> str:
    return re.sub(r"\s+", "", source)


def faults(build_source: str, reduce_source: str) -> tuple[bool, bool]:
    """Which of the two faulty lines (build, reduce) the installed trainer still has."""
    return BUGGY_BUILD in _squashed(build_source), BUGGY_REDUCE in _squashed(reduce_source)


def keras_version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``3.15.1`` or ``3.9.0.dev2025``."""
    major_minor = re.match(r"(\d+)\.(\d+)", text)
    return (int(major_minor.group(1)), int(major_minor.group(2))) if major_minor else (0, 0)


def refusal(steps_per_execution: int, jit_compile: bool, gpus: int) -> LaunchError | None:
    """Why a compiled model still cannot train multi-worker with the fix, if it cannot."""
    if steps_per_execution > 1:
        return LaunchError(
            f"Keras 3 with steps_per_execution={steps_per_execution} does not train under "
            "tf.distribute (keras-team/keras#19246)",
            "compile with steps_per_execution=1",
        )
    if jit_compile and gpus == 0:
        return LaunchError(
            "Keras 3 with jit_compile=True has no multi-worker collectives on CPU (XLA)",
            "compile with jit_compile=False (or 'auto')",
        )
    return None


def refuse(error: CtrainError) -> NoReturn:
    """End the training script before its first step with the error's one line and exit
    status: no traceback, as for ctrain's commands (the script is the user's, not a library
    caller that could recover)."""
    print(error.line(), file=sys.stderr, flush=True)
    raise SystemExit(error.exit_code)


def _build_from_local_batch(original: Any) -> Any:
    def build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
        from keras.src import tree
        from keras.src.backend.tensorflow import trainer

        strategy = self._distribute_strategy
        if strategy is None or not trainer._collective_all_reduce_multi_worker(strategy):
            return original(self, iterator=iterator, data_batch=data_batch)
        import tensorflow as tf

        refused = refusal(
            int(self.steps_per_execution),
            self.jit_compile is True,
            len(tf.config.list_logical_devices("GPU")),
        )
        if refused is not None:
            refuse(refused)
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = tree.map_structure(
                    lambda v: (
                        strategy.experimental_local_results(v)[0]
                        if isinstance(v, tf.distribute.DistributedValues)
                        else v
                    ),
                    next(it),
                )
                break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    return build


def _reduce_scalar_mean(original: Any) -> Any:
    def reduce_per_replica(values: Any, strategy: Any, reduction: Any) -> Any:
        from keras.src import tree
        from keras.src.backend.tensorflow import trainer

        multi = trainer._collective_all_reduce_multi_worker(strategy)
        if not multi or reduction not in ("auto", "mean"):
            return original(values, strategy, reduction)
        return tree.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)

    return reduce_per_replica


def apply(trainer: Any, version: str) -> tuple[bool, bool]:
    """Replace the faulty functions of Keras 3's TensorFlow ``trainer`` module (Keras
    ``version``); returns which were replaced (build, reduce)."""
    if keras_version(version) < MIN_VERSION:
        raise LaunchError(
            f"Keras {version} does not all-reduce gradients under MultiWorkerMirroredStrategy",
            "install keras>=3.5, or run the script with tf-keras (CTRAIN_KERAS=2)",
        )
    cls = trainer.TensorFlowTrainer
    build_source = inspect.getsource(cls._maybe_symbolic_build)
    build, reduce = faults(build_source, inspect.getsource(trainer.reduce_per_replica))
    if build and BUILD_LOOP not in _squashed(build_source):
        raise LaunchError(
            f"Keras {version} builds models in a way ctrain's multi-worker fix does not know",
            "use keras 3.5 to 3.15, or run the script with tf-keras (CTRAIN_KERAS=2)",
        )
    if build:
        cls._maybe_symbolic_build = _build_from_local_batch(cls._maybe_symbolic_build)
    if reduce:
        trainer.reduce_per_replica = _reduce_scalar_mean(trainer.reduce_per_replica)
    return build, reduce


def _apply_to(module: ModuleType) -> None:
    from importlib.metadata import version  # keras itself may be half imported here

    try:
        apply(module, version("keras"))
    except LaunchError as error:
        refuse(error)


def needed(environ: Mapping[str, str]) -> bool:
    """Whether this process trains in multiworker mode on Keras 3 (what ctrain launch set)."""
    multiworker = environ.get(ENV_LAUNCH_MODE) == Mode.MULTIWORKER.value
    return multiworker and not tf_keras_chosen(environ.get(LEGACY_KERAS))


def arm() -> None:
    """Apply the fix now if Keras 3's trainer is imported, else as soon as it is."""
    when_imported(TRAINER, _apply_to)
