"""The signals that stop a training process, and how long it may take to stop.

SIGUSR2 (the time limit's warning, sent minutes early) and SIGTERM (what Slurm sends when it
ends a job: scancel, ``scontrol requeue``, preemption, the time limit itself; then SIGKILL after
``KillWait``, 30 s by default, or ``GraceTime`` for preemption) both ask the training to stop
after the current step, with a checkpoint. A SIGTERM also starts the budget
(``CTRAIN_STOP_BUDGET`` seconds): a process still running when it is spent ends itself, with
no checkpoint if none was agreed yet (a write cut short leaves only a temporary directory, never
a checkpoint), rather than be killed without a word. A second SIGTERM, or a SIGINT, ends the
process at once; a SIGTERM within ``SAME_SIGNAL`` seconds of the first is the same one delivered
twice (Slurm signals every process of a step, and a container runtime in it, Apptainer's starter
say, passes its own on to the training), not a second.

The handler of each signal only records it (it runs in the main thread, between Python
bytecodes); the decisions are taken by a thread that reads each signal's number from Python's
wakeup file descriptor, written the moment the signal arrives: the budget and a second signal
work even while the main thread waits in a collective or a checkpoint write.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType, ModuleType
from typing import Any

from ctrain.errors import REQUEUE_EXIT_CODE
from ctrain.names import ENV_LAUNCH_MODE, STOP_SIGNALS, Mode
from ctrain.train import peerwatch

# Their handler does nothing: the watcher ends the process. (Python's own SIGINT handler would
# raise KeyboardInterrupt in the main thread, racing the watcher: the process then died of the
# signal, without the line, or hung in its shutdown with the watcher frozen mid-print.)
AT_ONCE = (signal.SIGINT,)
SAME_SIGNAL = 2.0  # seconds after the first SIGTERM within which another is the same one


class Action(enum.Enum):
    """What a signal does to a training process."""

    STOP = "stop after this step"  # the first stop request, or another USR2
    STOP_WITHIN_BUDGET = "stop after this step, within the budget"  # the first SIGTERM
    END_NOW = "end now"  # a second SIGTERM, or SIGINT


def action(signum: int, terms_before: int) -> Action:
    """What ``signum`` does, given the SIGTERMs that came before it."""
    if signum in AT_ONCE or (signum == signal.SIGTERM and terms_before > 0):
        return Action.END_NOW
    if signum == signal.SIGTERM:
        return Action.STOP_WITHIN_BUDGET
    return Action.STOP


def exit_code(signum: int, saved: bool) -> int:
    """The exit status of a process that ends before its normal end: the requeue code when its
    checkpoint is written (the job goes on from it), else the shell's code for the signal."""
    return REQUEUE_EXIT_CODE if saved else 128 + signum


Ender = Callable[[int, str], None]


def end_process(code: int, message: str) -> None:
    """Print ``message`` and end this process with ``code`` at once (from any thread); with the
    requeue code (the checkpoint is written), a goodbye to the peer-loss watch first."""
    try:
        if code == REQUEUE_EXIT_CODE:
            peerwatch.WATCH.goodbye()
        print(message, file=sys.stderr, flush=True)
        sys.stdout.flush()
    finally:
        os._exit(code)


class Watcher:
    """The decisions on each arriving signal and on the budget (pure: the clock and the way the
    process ends are given). ``saved``: the agreed checkpoint is written."""

    def __init__(
        self,
        budget: float,
        end: Ender = end_process,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.budget = budget
        self.end = end
        self.clock = clock
        self.terms = 0
        self.deadline: float | None = None
        self.saved = False
        self.first_term: float | None = None

    def arrived(self, signum: int) -> None:
        if self._same_term(signum):
            return  # the first one again, passed on by a runtime
        chosen = action(signum, self.terms)
        if signum == signal.SIGTERM:
            self.terms += 1
        if chosen is Action.END_NOW:
            name = signal.Signals(signum).name
            again = " again" if signum == signal.SIGTERM else ""
            self.end(exit_code(signum, self.saved), f"ctrain: got {name}{again}: ending now")
        elif chosen is Action.STOP_WITHIN_BUDGET:
            self.first_term = self.clock()
            self.deadline = self.first_term + self.budget

    def _same_term(self, signum: int) -> bool:
        first = self.first_term
        return signum == signal.SIGTERM and first is not None and self.clock() - first < SAME_SIGNAL

    def left(self) -> float | None:
        """Seconds until the budget is spent; None while no SIGTERM came."""
        return None if self.deadline is None else max(0.0, self.deadline - self.clock())

    def spent(self) -> None:
        what = "the checkpoint is written" if self.saved else "no checkpoint was agreed"
        self.end(
            exit_code(signal.SIGTERM, self.saved),
            f"ctrain: {self.budget:g} s since SIGTERM (CTRAIN_STOP_BUDGET) and {what}: ending now",
        )

    def run(self, wakeup: socket.socket) -> None:
        """Read signal numbers from ``wakeup`` until it closes, ending at the budget."""
        while True:
            left = self.left()
            if left == 0:
                self.spent()
                return
            wakeup.settimeout(left)
            try:
                data = wakeup.recv(64)
            except TimeoutError:
                self.spent()
                return
            if not data:
                return
            for signum in data:
                self.arrived(signum)


class StopRequest:
    """The stop signals this process received (signals are process-wide, so is this)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.watcher: Watcher | None = None

    def handler(self, signum: int, frame: FrameType | None) -> None:
        if not self.received:
            name = signal.Signals(signum).name
            budget = self.watcher.budget if self.watcher is not None else None
            within = (
                f" (within {budget:g} s: CTRAIN_STOP_BUDGET)"
                if signum == signal.SIGTERM and budget is not None
                else ""
            )
            print(
                f"ctrain: got {name}: finishing this step, then checkpoint and requeue{within}",
                file=sys.stderr,
                flush=True,
            )
        self.received.append(signum)

    @property
    def requested(self) -> bool:
        return bool(self.received)

    def saved(self) -> None:
        """The agreed checkpoint is written: an end from now on exits with the requeue code."""
        if self.watcher is not None:
            self.watcher.saved = True

    def install(self, budget: float) -> None:
        """Record the stop signals instead of dying of them, and start the watcher (main thread
        only; safe to repeat: it takes the signals back from whoever installed a handler since,
        as TensorFlow's MultiWorkerMirroredStrategy does for SIGTERM)."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.handler)  # unconditional: getsignal does not see C handlers
        for signum in AT_ONCE:
            signal.signal(signum, _leave_it_to_the_watcher)
        if self.watcher is not None:
            self.watcher.budget = budget
            return
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        # A forked child (a data loader's worker) gets the same signals from Slurm: its own
        # must not reach this process's watcher as a second SIGTERM.
        os.register_at_fork(after_in_child=_forget_wakeup)
        self.watcher = Watcher(budget)
        self._wakeup = (reader, writer)  # kept open for the life of the process
        threading.Thread(
            target=self.watcher.run, args=(reader,), name="ctrain-stop", daemon=True
        ).start()


def _leave_it_to_the_watcher(signum: int, frame: FrameType | None) -> None:
    """A Python-level handler, so that the signal reaches the wakeup descriptor, doing nothing."""


def _forget_wakeup() -> None:
    with contextlib.suppress(ValueError):  # forked from another thread than the main one
        signal.set_wakeup_fd(-1)


def default_sigterm() -> None:
    """SIGTERM ends this process again (TensorFlow's multi-worker runtime installs a handler
    that only records it): for a script that does not use ctrain's stop handler."""
    if signal.getsignal(signal.SIGTERM) != STOP.handler:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


STRATEGY_MODULE = "tensorflow.python.distribute.collective_all_reduce_strategy"


def needed(environ: Mapping[str, str]) -> bool:
    """Whether this process trains in multiworker mode (what ctrain launch set)."""
    return environ.get(ENV_LAUNCH_MODE) == Mode.MULTIWORKER.value


def arm_default_sigterm() -> None:
    """For a script that never calls ctrain (the start-up hook): SIGTERM's default back after
    each MultiWorkerMirroredStrategy is made, once TensorFlow's module is imported."""
    from ctrain.train.after_import import when_imported

    when_imported(STRATEGY_MODULE, _after_each_strategy)


def _after_each_strategy(module: ModuleType) -> None:
    strategy = module.CollectiveAllReduceStrategy
    made = strategy.__init__
    if getattr(made, "ctrain_default_sigterm", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        with contextlib.suppress(ValueError):  # made in another thread than the main one
            default_sigterm()

    __init__.ctrain_default_sigterm = True  # type: ignore[attr-defined]
    strategy.__init__ = __init__


STOP = StopRequest()
