"""The step-time breakdown's arithmetic and readers (train/breakdown.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctrain.train.breakdown import (
    RankTime,
    Shares,
    clip,
    latest_xplane,
    length,
    read_horovod_timeline,
    shares,
    subtract,
    table,
    union,
)


@pytest.mark.parametrize(
    ("intervals", "merged"),
    [
        ([], []),
        ([(0, 1)], [(0, 1)]),
        ([(2, 3), (0, 1)], [(0, 1), (2, 3)]),
        ([(0, 2), (1, 3)], [(0, 3)]),
        ([(0, 5), (1, 2)], [(0, 5)]),
        ([(0, 1), (1, 2)], [(0, 2)]),
    ],
)
def test_union(intervals: list[tuple[float, float]], merged: list[tuple[float, float]]) -> None:
    assert union(intervals) == merged
    assert length(intervals) == sum(e - s for s, e in merged)


@pytest.mark.parametrize(
    ("intervals", "clipped"),
    [
        ([(-1, 1), (2, 3), (4, 9)], [(0, 1), (2, 3), (4, 5)]),
        ([(-2, -1), (6, 7)], []),  # wholly before, wholly after
        ([(-1, 0), (5, 6)], []),  # touching the window only at its ends
    ],
)
def test_clip(intervals: list[tuple[float, float]], clipped: list[tuple[float, float]]) -> None:
    assert clip(intervals, (0, 5)) == clipped


@pytest.mark.parametrize(
    ("intervals", "taken", "left"),
    [
        ([(0, 10)], [(2, 3), (5, 7)], [(0, 2), (3, 5), (7, 10)]),
        ([(0, 10)], [(-1, 11)], []),
        ([(0, 2), (4, 6)], [(1, 5)], [(0, 1), (5, 6)]),
        ([(5, 10)], [(12, 15)], [(5, 10)]),  # taken after
        ([(5, 10)], [(0, 2), (6, 7)], [(5, 6), (7, 10)]),  # one before, one inside
        ([(0, 10)], [(0, 2)], [(2, 10)]),  # from the start
        ([(0, 10)], [(5, 10)], [(0, 5)]),  # to the end
    ],
)
def test_subtract(
    intervals: list[tuple[float, float]],
    taken: list[tuple[float, float]],
    left: list[tuple[float, float]],
) -> None:
    assert subtract(intervals, taken) == left


@pytest.mark.parametrize(
    ("inputs", "collectives", "expected", "bottleneck"),
    [
        ([(0, 8)], [], Shares(0.8, 0.2, 0.0), "input"),
        ([], [(2, 9)], Shares(0.0, 0.3, 0.7), "collectives"),
        ([(0, 2)], [(1, 4)], Shares(0.2, 0.6, 0.2), "compute"),  # overlap counts as input
        ([(0, 3), (1, 2)], [(5, 6), (5.5, 6.5)], Shares(0.3, 0.55, 0.15), "compute"),
        ([(-5, 1)], [(9, 20)], Shares(0.1, 0.8, 0.1), "compute"),  # clipped to the window
    ],
)
def test_shares_add_up_and_name_the_bottleneck(
    inputs: list[tuple[float, float]],
    collectives: list[tuple[float, float]],
    expected: Shares,
    bottleneck: str,
) -> None:
    found = shares((0, 10), inputs, collectives)
    assert found == pytest.approx(expected)
    assert sum(found) == pytest.approx(1.0)
    assert found.bottleneck == bottleneck


def test_an_empty_window_is_refused() -> None:
    with pytest.raises(ValueError, match="^an empty window$"):
        shares((3, 3), [], [])


def test_a_window_under_a_second() -> None:
    assert shares((0, 0.5), [(0, 0.25)], []) == Shares(0.5, 0.5, 0.0)


def timeline(events: list[dict[str, object]], closed: bool) -> str:
    text = "[\n" + ",\n".join(json.dumps(e) for e in events)
    return text + ("\n]" if closed else ",")


@pytest.mark.parametrize("closed", [True, False])
def test_horovods_timeline_in_seconds_since_the_epoch(closed: bool) -> None:
    events: list[dict[str, object]] = [
        {
            "name": "process_name",
            "ph": "M",
            "pid": 0,
            "args": {"start_time_since_epoch_in_micros": 1_000_000_000},
        },
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "grad_0"}},
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 100, "pid": 1},
        {"ph": "E", "ts": 300, "pid": 1},
        {"ph": "B", "name": "ALLREDUCE", "ts": 300, "pid": 1},
        {"ph": "B", "name": "MPI_ALLREDUCE", "ts": 350, "pid": 1},
        {"ph": "E", "ts": 400, "pid": 1},
        {"ph": "E", "ts": 500, "pid": 1},
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 450, "pid": 2},
        {"ph": "E", "ts": 900, "pid": 2},
        {"ph": "B", "name": "ALLREDUCE", "ts": 2000, "pid": 3},  # still open: dropped
    ]
    found = read_horovod_timeline(timeline(events, closed))
    assert found == [
        (pytest.approx(1000.0001, rel=1e-15), pytest.approx(1000.0009, rel=1e-15)),
    ]


def test_an_empty_timeline_has_no_intervals() -> None:
    assert read_horovod_timeline("") == []
    assert read_horovod_timeline("[\n") == []


def test_without_its_start_a_timeline_counts_from_its_beginning() -> None:
    events: list[object] = [
        [],  # not an event: skipped
        {"ph": "B", "pid": 1},  # no ts: the timeline's beginning
        {"ph": "E", "ts": 100, "pid": 1},
        {"ph": "B", "ts": 200, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 250, "pid": 1, "tid": 2},  # another thread's: nothing open there
        {"ph": "E", "ts": 300, "pid": 2, "tid": 1},  # another process's: nothing open there
        {"ph": "E", "ts": 400, "pid": 1, "tid": 1},
    ]
    assert read_horovod_timeline(timeline(events, closed=False)) == [
        (0.0, pytest.approx(1e-4, rel=1e-12)),
        (pytest.approx(2e-4, rel=1e-12), pytest.approx(4e-4, rel=1e-12)),
    ]


def test_a_broken_timeline_is_refused() -> None:
    with pytest.raises(ValueError):
        read_horovod_timeline('[\n{"ph": "B", "ts": 1, "pid": 1},X,')


def test_the_newest_trace(tmp_path: Path) -> None:
    assert latest_xplane(tmp_path) is None
    runs = ["2026_01_01_10_00_00", "2026_01_01_10_00_05", "2026_01_01_10_01_00"]
    for name in reversed(runs):
        (tmp_path / "plugins" / "profile" / name).mkdir(parents=True)
        (tmp_path / "plugins" / "profile" / name / "cn01.xplane.pb").write_bytes(b"")
    (tmp_path / "plugins" / "profile" / runs[-1] / "cn01.trace.json.gz").write_bytes(b"")
    assert latest_xplane(tmp_path) == tmp_path / "plugins/profile" / runs[-1] / "cn01.xplane.pb"


def test_the_table_names_the_slowest_rank_and_the_bottleneck() -> None:
    times = [RankTime(0, "cn01", 5, 0.5), RankTime(3, "cn02", 5, 0.6), RankTime(1, "cn01", 5, 0.55)]
    text = table("20-24", times, 4, Shares(0.1, 0.2, 0.7), "all-reduce", "/p/job1.0")
    assert text.splitlines() == [
        "ctrain: profile of steps 20-24 (5 steps), 4 rank(s), in /p/job1.0",
        "  time per step      100.0 ms on rank 0; slowest rank 3 (cn02) 120.0 ms"
        " (3 of 4 ranks reported)",
        "  input            10.0 %   waiting for the next batch (tf.data)",
        "  compute          20.0 %",
        "  collectives      70.0 %   all-reduce in flight",
        "  bottleneck: collectives (docs/profiling.md: what to try)",
    ]


def test_without_rank_0_the_table_times_the_first() -> None:
    times = [RankTime(2, "cn02", 4, 0.4), RankTime(1, "cn01", 4, 0.8)]
    text = table("1-4", times, 2, Shares(0.5, 0.25, 0.25), "all-reduce", "/p")
    assert text.splitlines()[:2] == [
        "ctrain: profile of steps 1-4 (4 steps), 2 rank(s), in /p",
        "  time per step      100.0 ms on rank 0; slowest rank 1 (cn01) 200.0 ms",
    ]
    assert text.splitlines()[-1] == "  bottleneck: input (docs/profiling.md: what to try)"


def test_without_a_trace_the_table_says_so() -> None:
    text = table("2-3", [RankTime(0, "vm", 2, 0.2)], 1, None, "all-reduce", "/p")
    assert text.splitlines()[-1].startswith("  no trace on rank 0")
    assert "slowest" not in text
