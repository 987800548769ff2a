"""ctrain's Horovod optimizer for Keras 3, against a stand-in for Horovod's TensorFlow ops (the
real ops run in tests/integration/test_keras3_scripts.py)."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest

from ctrain.distributed import Context, Launched
from ctrain.names import Mode
from ctrain.train import keras3_horovod


class SGD:
    """Shaped like a Keras 3 optimizer: config round trip, ``apply(grads, variables)``."""

    def __init__(self, learning_rate: float = 0.01) -> None:
        self.learning_rate = learning_rate
        self.applied: list[Any] = []

    def get_config(self) -> dict[str, Any]:
        return {"learning_rate": self.learning_rate}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> SGD:
        return cls(**config)

    def apply(self, grads: list[Any], trainable_variables: Any = None) -> str:
        self.applied.append((list(grads), trainable_variables))
        return "applied"


SGD.__module__ = "keras.src.optimizers.sgd"


class TfKerasSGD:
    pass


TfKerasSGD.__module__ = "tf_keras.src.optimizers.sgd"


@pytest.fixture
def horovod(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str]]:
    """horovod.tensorflow whose allreduce 'averages' with another rank holding 10 * grad."""
    calls: list[tuple[float, str]] = []
    ops = ModuleType("horovod.tensorflow")
    ops.Average = "average"  # type: ignore[attr-defined]

    def allreduce(tensor: float, op: str) -> float:
        calls.append((tensor, op))
        return (tensor + 10 * tensor) / 2

    ops.allreduce = allreduce  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "horovod", ModuleType("horovod"))
    monkeypatch.setitem(sys.modules, "horovod.tensorflow", ops)
    return calls


def test_keras3_optimizers_are_told_from_tf_keras_ones() -> None:
    assert keras3_horovod.is_keras3_optimizer(SGD())
    assert not keras3_horovod.is_keras3_optimizer(TfKerasSGD())


def test_updates_use_the_gradients_averaged_over_ranks(horovod: list[tuple[float, str]]) -> None:
    wrapped = keras3_horovod.distributed_optimizer(SGD(0.5))
    assert wrapped.apply([2.0, None], ["w", "b"]) == "applied"
    assert wrapped.applied == [([11.0, None], ["w", "b"])]
    assert horovod == [(2.0, "average")]  # no collective for a missing gradient


def test_the_copy_keeps_class_settings_and_saved_name(horovod: list[tuple[float, str]]) -> None:
    original = SGD(0.5)
    wrapped = keras3_horovod.distributed_optimizer(original)
    assert wrapped is not original and isinstance(wrapped, SGD)
    assert wrapped.learning_rate == 0.5
    assert (type(wrapped).__name__, type(wrapped).__module__) == ("SGD", SGD.__module__)
    assert keras3_horovod.is_keras3_optimizer(wrapped)


class HorovodKeras:
    """Stands in for horovod.tensorflow.keras: its optimizer wraps tf-keras ones only."""

    def DistributedOptimizer(self, optimizer: Any) -> tuple[str, Any]:  # noqa: N802
        return ("horovod's", optimizer)


def test_the_context_gives_each_keras_its_horovod_optimizer(
    horovod: list[tuple[float, str]],
) -> None:
    ctx = Context(
        Launched(
            mode=Mode.HOROVOD,
            rank=0,
            size=2,
            local_rank=0,
            local_size=2,
            collective="ring",
            collective_timeout=600,
        ),
        None,
        HorovodKeras(),
        True,
    )
    tf_keras = TfKerasSGD()
    assert ctx.optimizer(tf_keras) == ("horovod's", tf_keras)
    keras3 = ctx.optimizer(SGD(0.5))
    assert isinstance(keras3, SGD) and keras3.apply([4.0]) == "applied"
    assert keras3.applied == [([22.0], None)]
    alone = Context(
        Launched(
            mode=Mode.SINGLE,
            rank=0,
            size=1,
            local_rank=0,
            local_size=1,
            collective="ring",
            collective_timeout=600,
        ),
        None,
        None,
        True,
    )
    plain = SGD()
    assert alone.optimizer(plain) is plain
