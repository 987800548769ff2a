"""Training steps of a script that never calls ctrain, for ``--profile`` (train/profiling.py).

A step is one call, from Python, of the ``tf.function`` that applies the gradients: Keras
``fit``'s train function (tf-keras: ``train_function``; Keras 3: ``multi_step_on_iterator`` or
``one_step_on_iterator``) or a custom loop's own step function. Which function that is, the
optimizer says: ctrain wraps ``apply_gradients`` of the Keras optimizers, and when it is traced
inside a ``tf.function`` the outermost function being traced is the step function; from then
on each of its calls is a step. A loop that applies gradients eagerly (no ``tf.function``,
or ``run_eagerly=True``) has one step per ``apply_gradients`` call.

With ``steps_per_execution=N`` a Keras call runs N batches: a step here is then N batches.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from ctrain.train.after_import import when_imported
from ctrain.train.profiling import Profiler, from_environ

FUNCTION = "tensorflow.python.eager.polymorphic_function.polymorphic_function"
OPTIMIZERS = {  # module: the class whose apply_gradients every optimizer of it goes through
    "tf_keras.src.optimizers.optimizer": "Optimizer",
    "tf_keras.src.optimizers.legacy.optimizer_v2": "OptimizerV2",
    "keras.src.optimizers.base_optimizer": "BaseOptimizer",
}
WRAPPED = "__ctrain_steps__"


class Steps:
    """Finds the step function and tells the profiler where each step begins and ends."""

    def __init__(self, profiler: Profiler) -> None:
        self.profiler = profiler
        self.function: str | None = None  # the step function's name, once known
        self.local = threading.local()  # depth of function calls on this thread
        self.eager = False  # an eager step is open (eager loops: apply_gradients ends a step)

    def calling(self, name: str, call: Callable[[], Any]) -> Any:
        """Run ``call``, a call of the ``tf.function`` ``name``, counting it if it is a step."""
        depth = getattr(self.local, "depth", 0)
        if depth or (self.function is not None and name != self.function):
            return call()
        known = self.function is not None
        if known:
            self.profiler.begin()
        self.local.depth = depth + 1
        try:
            return call()
        finally:
            self.local.depth = depth
            if known:
                self.profiler.end()
            elif self.function == name:  # traced during this call: it was the first step
                self.profiler.begin()
                self.profiler.end()

    def applied(self, graph_name: str | None) -> None:
        """``apply_gradients`` ran: inside the tf.function ``graph_name`` being traced, or
        eagerly (None), where the call itself is the end of a step."""
        if graph_name is not None:
            if self.function is None:
                self.function = graph_name
            return
        if self.function is not None:
            return
        if not self.eager:  # the first step began before anything could tell
            self.profiler.begin()
        self.profiler.end()
        self.profiler.begin()  # the next step begins as this one ends
        self.eager = True


def _outermost_graph() -> str | None:
    """The name of the outermost ``tf.function`` being traced here, or None when eager."""
    import tensorflow as tf
    from tensorflow.python.framework import func_graph

    graph = tf.compat.v1.get_default_graph()
    name = None
    while isinstance(graph, func_graph.FuncGraph):
        name = graph.name
        graph = graph.outer_graph
    return name


def _wrap_function(steps: Steps) -> Callable[[ModuleType], None]:
    def apply(module: ModuleType) -> None:
        cls = module.Function
        original = cls.__call__
        if getattr(original, WRAPPED, False):
            return

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            return steps.calling(
                getattr(self, "_name", ""), lambda: original(self, *args, **kwargs)
            )

        setattr(__call__, WRAPPED, True)
        cls.__call__ = __call__

    return apply


def _wrap_optimizer(steps: Steps, class_name: str) -> Callable[[ModuleType], None]:
    def apply(module: ModuleType) -> None:
        cls = getattr(module, class_name)
        original = cls.apply_gradients
        if getattr(original, WRAPPED, False):
            return

        def apply_gradients(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, *args, **kwargs)
            steps.applied(_outermost_graph())
            return result

        setattr(apply_gradients, WRAPPED, True)
        cls.apply_gradients = apply_gradients

    return apply


class Hooks:
    """The step hooks of this process, armed once (by the start-up hook, ``ctrain.distributed``
    or ``ctx.profile``): HOOKS."""

    def __init__(self) -> None:
        self.steps: Steps | None = None

    def armed(self) -> Steps | None:
        return self.steps

    def arm(self, profiler: Profiler) -> Steps:
        """Count the steps of this process for ``profiler`` from now on (and close its window
        when the process ends). Armed once: a second call gives the first Steps."""
        if self.steps is not None:
            return self.steps
        steps = self.steps = Steps(profiler)
        when_imported(FUNCTION, _wrap_function(steps))
        for module, class_name in OPTIMIZERS.items():
            when_imported(module, _wrap_optimizer(steps, class_name))
        atexit.register(profiler.finish)
        return steps

    def arm_from(self, environ: Mapping[str, str]) -> Steps | None:
        """Arm the step hooks if ``ctrain launch --profile`` asked for them in this process."""
        profiler = from_environ(environ)
        return self.arm(profiler) if profiler is not None else self.armed()


HOOKS = Hooks()  # the one of this process


def armed() -> Steps | None:
    """HOOKS' Steps, once armed."""
    return HOOKS.armed()


def arm(profiler: Profiler) -> Steps:
    """HOOKS.arm: count this process's steps for ``profiler``."""
    return HOOKS.arm(profiler)


def arm_from(environ: Mapping[str, str]) -> Steps | None:
    """HOOKS.arm_from: arm where ``ctrain launch --profile`` asked for it."""
    return HOOKS.arm_from(environ)
