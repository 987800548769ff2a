"""The background builds of a test run (tests/support/images/background.py and lanes.py):
one run per build, shared outcomes, waits across threads, processes under nice, and the lanes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tests.support.helpers import REPO
from tests.support.images import background, lanes


def test_once_runs_a_build_once_and_shares_its_result() -> None:
    calls: list[str] = []

    @background.once
    def build(name: str) -> str:
        calls.append(name)
        return name.upper()

    assert [build("a"), build("a"), build("b"), build(name="a")] == ["A", "A", "B", "A"]
    assert calls == ["a", "b", "a"]  # a keyword call is another key


def test_once_shares_a_failure_without_running_again() -> None:
    calls = 0

    @background.once
    def build() -> None:
        nonlocal calls
        calls += 1
        raise AssertionError("make image-cpu failed")

    for _ in range(2):
        with pytest.raises(AssertionError, match="make image-cpu failed"):
            build()
    assert calls == 1


def test_a_caller_waits_for_the_run_in_another_thread() -> None:
    started, release = threading.Event(), threading.Event()
    calls = 0

    @background.once
    def build() -> int:
        nonlocal calls
        calls += 1
        started.set()
        release.wait(10)
        return 42

    thread = threading.Thread(target=build)
    thread.start()
    assert started.wait(10)
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(build()))
    waiter.start()
    time.sleep(0.2)
    assert got == []  # still waiting for the first run
    release.set()
    thread.join(10)
    waiter.join(10)
    assert got == [42]
    assert calls == 1


def in_child(code: str) -> str:
    """``code`` run by a Python of its own with the background module imported (a lane or
    ``stop`` here would reach the builds the run itself has started); what it printed."""
    done = subprocess.run(
        [sys.executable, "-c", "from tests.support.images import background\n" + code],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_run_is_niced_in_a_background_lane_only() -> None:
    printed = in_child(
        "import threading\n"
        "STAT = ['cut', '-d', ' ', '-f19', '/proc/self/stat']\n"
        "def niceness():\n"
        "    print(background.run(STAT, timeout=30).stdout)\n"
        "niceness()\n"
        "background.start([[niceness]])\n"
        "background._threads[0].join(30)\n"
        "print(background.report())\n"
    )  # fmt: skip
    inline, lane, report = printed.split("\n\n", 2)
    assert int(lane) == min(int(inline) + background.NICE, 19)
    assert "'niceness: done in the background in " in report


def test_stop_ends_a_running_build() -> None:
    printed = in_child(
        "import threading, time\n"
        "done = []\n"
        "thread = threading.Thread(target=lambda: done.append(\n"
        "    background.run(['sleep', '60'], timeout=120).returncode))\n"
        "thread.start()\n"
        "while not background._processes: time.sleep(0.05)\n"
        "background.stop()\n"
        "thread.join(10)\n"
        "print(done)\n"
    )  # fmt: skip
    assert printed == "[-9]\n"


def test_lanes_keep_their_order_and_drop_what_is_not_wanted() -> None:
    chosen = lanes.lanes({"gpu-image", "foreign", "cpu-image"})
    assert chosen == [
        [lanes.BUILDS["cpu-image"], lanes.BUILDS["foreign"]],
        [lanes.BUILDS["gpu-image"]],
    ]
    assert lanes.lanes(set()) == []


def test_every_build_is_in_one_lane_and_has_a_rank() -> None:
    in_lanes = [name for lane in lanes.LANES for name in lane]
    assert sorted(in_lanes) == sorted(lanes.BUILDS) == sorted(lanes.READY)
    assert lanes.ready_rank(()) == -1
    assert lanes.ready_rank(("cpu-image", "gpu-image")) == lanes.READY["gpu-image"]
    assert lanes.unknown({"cpu-image", "tpu-image"}) == {"tpu-image"}
