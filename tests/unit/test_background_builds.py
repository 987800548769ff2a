"""The background builds of a test run (tests/integration/images/background.py and lanes.py):
one run per build, shared outcomes, waits across threads, processes under nice, and the lanes."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.images import background, lanes


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


def test_run_is_niced_in_a_background_lane_only() -> None:
    seen: list[str] = []

    def niceness() -> None:
        seen.append(
            background.run(["sh", "-c", "cut -d' ' -f19 /proc/self/stat"], timeout=30).stdout
        )

    niceness()
    lane = threading.Thread(target=background._lane, args=([niceness],))
    lane.start()
    lane.join(30)
    assert background._log.pop().startswith("niceness: done in the background in ")
    base = int(seen[0])
    assert [int(s) for s in seen] == [base, min(base + background.NICE, 19)]


def test_stop_ends_a_running_build() -> None:
    done: list[int] = []
    thread = threading.Thread(
        target=lambda: done.append(background.run(["sleep", "60"], timeout=120).returncode)
    )
    thread.start()
    for _ in range(100):
        if background._processes:
            break
        time.sleep(0.05)
    background.stop()
    thread.join(10)
    assert done == [-9]


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
