"""ctrain's Horovod callbacks on Keras 3 models.

The callbacks of ``ctrain.train.callbacks`` subclass ``tf.keras``'s Callback, which is Keras 3's
when TF_USE_LEGACY_KERAS is off, and metric averaging and warm-up work there as they are. Only
the initial broadcast differs: a Keras 3 variable is broadcast through the ``tf.Variable`` it
holds. Horovod's ops cannot run in an XLA-compiled step, which Keras 3 makes by default on
GPUs: refused before the first step, with the fix.
"""

from __future__ import annotations

from typing import Any

from ctrain.errors import LaunchError
from ctrain.train import callbacks
from ctrain.train.keras3_mwms import refuse


class BroadcastInitialWeights(callbacks.BroadcastInitialWeights):
    """Every rank starts from rank 0's weights (Keras 3 models)."""

    def _broadcast(self, variables: list[Any]) -> None:
        super()._broadcast([variable.value for variable in variables])

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if self.model.jit_compile is True:
            refuse(
                LaunchError(
                    "Horovod's allreduce cannot run in an XLA-compiled Keras 3 step "
                    "(jit_compile, on by default on GPUs)",
                    "compile with jit_compile=False",
                )
            )
        super().on_train_begin(logs)
