"""What runs inside the training script: callbacks, checkpoints, preemption, datasets.

Importing it (every training-script API of ctrain does) makes a ctrain error that reaches the
top of the script end it as ctrain's commands end: its one line on stderr and its exit code
(README's table: 6 for a checkpoint of another model or configuration), not a traceback and 1.
Every other exception goes to the hook that was there before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType

from ctrain.errors import CtrainError

Hook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


class OneLineHook:
    """``sys.excepthook`` for a training script: a CtrainError as its line and exit code."""

    def __init__(self, previous: Hook) -> None:
        self.previous = previous

    def __call__(
        self, kind: type[BaseException], error: BaseException, tb: TracebackType | None
    ) -> None:
        if isinstance(error, CtrainError):
            print(error.line(), file=sys.stderr, flush=True)
            raise SystemExit(error.exit_code)  # Python exits with it, atexit handlers still run
        self.previous(kind, error, tb)


if not isinstance(sys.excepthook, OneLineHook):  # once, whatever imports it first
    sys.excepthook = OneLineHook(sys.excepthook)
