"""A rank alive but stuck: no training step for ``stall_timeout`` seconds ends it.

A rank that dies ends its step under every launcher (tests/integration/test_rank_loss_real.py;
under ``srun --mpi=pmix`` without ``--kill-on-bad-exit``, Horovod's through the peer-loss
watch, train/peerwatch.py). A rank that hangs does not end its step: a peer stopped (SIGSTOP, a
node swapping to death), a collective waiting for a message that never comes, a file system that
no longer answers. Every other rank then waits in its next collective, and the job holds its
GPUs until the time limit. Here each rank watches its own progress: the end of a training or
validation step, or of an epoch. While ``fit`` runs and none comes for ``stall_timeout`` seconds
(``CTRAIN_STALL_TIMEOUT``), the rank says so in one line and ends with ``STALLED_EXIT_CODE``; the
launcher ends the others. Outside ``fit`` nothing is watched (the script's own evaluation or
export may take what it takes).

The default, 1800 s, leaves room for what a healthy rank may spend between two steps: the first
step's tracing and compilation, a validation pass (its steps count), a checkpoint. A slow rank
that goes on making steps is never ended, however slow. 0 turns the watchdog off.

The decisions are pure (``Progress``: the clock is given); a daemon thread reads them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ctrain.errors import STALLED_EXIT_CODE
from ctrain.train.stopping import Ender, end_process


class Progress:
    """When the last step ended, and whether the wait since is too long."""

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout = timeout
        self.clock = clock
        self.last: float | None = None  # None: not watching (outside fit)

    def start(self) -> None:
        self.last = self.clock()

    def step(self) -> None:
        if self.last is not None:
            self.last = self.clock()

    def stop(self) -> None:
        self.last = None

    def overdue(self) -> float | None:
        """Seconds since the last step where that is past the timeout, else None."""
        if self.last is None:
            return None
        waited = self.clock() - self.last
        return waited if waited > self.timeout else None

    def message(self, waited: float) -> str:
        return (
            f"ctrain: no training step ended for {waited:.0f} s (CTRAIN_STALL_TIMEOUT="
            f"{self.timeout:g}): this rank is stuck (a peer stopped or lost, a collective or a "
            f"file system that does not answer); ending it with {STALLED_EXIT_CODE}"
        )


class Watchdog:
    """A daemon thread that ends the process when ``progress`` is overdue (checked every
    ``period`` seconds: a tenth of the timeout, at most 30 s)."""

    def __init__(self, progress: Progress, end: Ender = end_process) -> None:
        self.progress = progress
        self.end = end
        self.period = min(30.0, max(0.1, progress.timeout / 10))
        self._thread: threading.Thread | None = None

    def check(self) -> bool:
        """End the process if overdue; whether it was."""
        waited = self.progress.overdue()
        if waited is None:
            return False
        self.end(STALLED_EXIT_CODE, self.progress.message(waited))
        return True

    def _run(self) -> None:
        while True:
            time.sleep(self.period)
            if self.check():
                return

    def start(self) -> None:
        """Start the thread (once; it lives as long as the process)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ctrain-watchdog", daemon=True)
            self._thread.start()
