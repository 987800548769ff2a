"""Horovod for Keras 3 models: gradients averaged over ranks by Horovod's TensorFlow ops.

``horovod.tensorflow.keras.DistributedOptimizer`` wraps tf-keras optimizers only. A Keras 3
optimizer applies its updates in ``apply(grads, variables)`` (``apply_gradients`` calls it),
so ctrain's wrapper is a subclass of the optimizer's own class whose ``apply`` first averages
the gradients over the ranks. It keeps the class's name and module: a model saved with it
loads back with the plain optimizer. The callbacks are in ``keras3_callbacks``.
"""

from __future__ import annotations

from typing import Any


def is_keras3_optimizer(optimizer: Any) -> bool:
    """Whether ``optimizer`` is a Keras 3 one (``keras.optimizers``), not a tf-keras one."""
    return any(cls.__module__.startswith("keras.src.") for cls in type(optimizer).__mro__)


def distributed_optimizer(optimizer: Any) -> Any:
    """A copy of the Keras 3 ``optimizer`` (same class and settings) whose updates use the
    gradients averaged over all Horovod ranks. Give it to ``compile`` before training."""
    import horovod.tensorflow as hvd

    base = type(optimizer)

    def apply(self: Any, grads: Any, trainable_variables: Any = None) -> Any:
        averaged = [grad if grad is None else hvd.allreduce(grad, op=hvd.Average) for grad in grads]
        return base.apply(self, averaged, trainable_variables)

    averaged: Any = type(
        base.__name__,
        (base,),
        {"apply": apply, "__module__": base.__module__, "__qualname__": base.__qualname__},
    )
    return averaged.from_config(optimizer.get_config())
