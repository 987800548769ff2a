"""The stall watchdog: when a rank counts as stuck, what it says, and its thread (a fake clock
and a recorded end: no process is ended here; the real one in test_watchdog_real.py)."""

from __future__ import annotations

import threading

import pytest

from ctrain.errors import STALLED_EXIT_CODE
from ctrain.settings import resolve
from ctrain.train.watchdog import Progress, Watchdog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_only_a_wait_past_the_timeout_inside_fit_is_overdue() -> None:
    clock = Clock()
    progress = Progress(60, clock)
    clock.now += 1000
    assert progress.overdue() is None  # not watching before fit
    progress.start()
    clock.now += 60
    assert progress.overdue() is None  # exactly the timeout: not yet
    clock.now += 0.5
    assert progress.overdue() == 60.5
    progress.step()
    assert progress.overdue() is None
    # A slow rank that goes on making steps is never overdue, however slow.
    for _ in range(100):
        clock.now += 59
        progress.step()
        assert progress.overdue() is None
    progress.stop()
    clock.now += 10_000
    assert progress.overdue() is None  # outside fit: the script's own time
    progress.step()  # a step outside fit (predict after fit) does not arm it
    assert progress.overdue() is None


def test_the_line_names_the_wait_the_setting_and_the_exit_code() -> None:
    assert Progress(1800).message(1812.4) == (
        "ctrain: no training step ended for 1812 s (CTRAIN_STALL_TIMEOUT=1800): this rank is "
        "stuck (a peer stopped or lost, a collective or a file system that does not answer); "
        "ending it with 124"
    )
    assert STALLED_EXIT_CODE == 124


def test_the_watchdog_ends_the_process_once_overdue() -> None:
    clock = Clock()
    ended: list[tuple[int, str]] = []
    done = threading.Event()

    def end(code: int, message: str) -> None:
        ended.append((code, message))
        done.set()

    progress = Progress(1, clock)
    watchdog = Watchdog(progress, end)
    assert watchdog.period == 0.1  # a tenth of the timeout
    assert Watchdog(Progress(1800)).period == 30  # at most 30 s
    assert not watchdog.check()
    progress.start()
    watchdog.start()
    watchdog.start()  # once
    clock.now += 5
    assert done.wait(10)
    assert ended == [(124, progress.message(5))]


@pytest.mark.parametrize(("environ", "timeout"), [({}, 1800), ({"CTRAIN_STALL_TIMEOUT": "0"}, 0)])
def test_the_setting(environ: dict[str, str], timeout: int) -> None:
    assert resolve({}, environ, "/").stall_timeout == timeout
