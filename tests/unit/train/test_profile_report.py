"""The chief's table from fixed traces and timelines (train/profiling.py's Profiler.report):
which intervals count as collectives in each mode, Horovod's timeline put on the trace's clock,
and the bottleneck it names. The live runs (tests/integration/test_profile_real.py) check the
table's shape only: which share is the largest there depends on the machine's load."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from ctrain.names import Mode
from ctrain.profile_window import StepWindow
from ctrain.train.breakdown import RankTime
from ctrain.train.profiling import TIMELINE, Profiler
from tests.support.xspace import MS_PS, Event, add_environment, add_plane

START_NS = 1_764_150_000_000_000_000  # the profile's start, ns since the epoch; it ran 2 s
S_PS = 1000 * MS_PS  # a second in ps
INPUT = "IteratorGetNextOp::DoCompute"


def fetches(*spans: tuple[float, float]) -> list[Event]:
    return [(INPUT, int(start * S_PS), int((end - start) * S_PS)) for start, end in spans]


def traced(run: Path, host: list[Event]) -> None:
    """The chief's trace of the window, where TensorFlow's profiler writes it under ``run``."""
    space = xplane_pb2.XSpace()
    stop_ns = START_NS + 2_000_000_000
    add_environment(space, {"profile_start_time": START_NS, "profile_stop_time": stop_ns})
    add_plane(space, "/host:CPU", {0: host})
    where = run / "rank-0" / "plugins" / "profile" / "2026_01_01_10_00_00"
    where.mkdir(parents=True)
    (where / "cn01.xplane.pb").write_bytes(space.SerializeToString())


def timeline(run: Path, offset: float, spans: list[tuple[float, float]]) -> None:
    """Horovod's timeline of the window, begun ``offset`` seconds after the profile: one
    negotiation per span, in µs from the timeline's start as Horovod writes them (unclosed)."""
    since = {"start_time_since_epoch_in_micros": START_NS // 1000 + round(offset * 1e6)}
    events: list[dict[str, object]] = [{"name": "process_name", "ph": "M", "args": since}]
    for begin, end in spans:
        events.append({"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": round(begin * 1e6)})
        events.append({"ph": "E", "ts": round(end * 1e6)})
    (run / TIMELINE).write_text("[\n" + ",\n".join(json.dumps(e) for e in events) + ",")


def shares_of(run: Path, mode: Mode, size: int) -> list[str]:
    """The table's shares and its bottleneck, as the chief prints them."""
    times = [RankTime(rank, "cn01", 5, 1.0) for rank in range(size)]
    text = Profiler(StepWindow(5, 9), run, 0, size, True, mode).report(times, 9)
    return text.splitlines()[2:]


def test_a_run_waiting_for_its_batches_is_input_bound(tmp_path: Path) -> None:
    traced(tmp_path, fetches((0.0, 0.3), (0.4, 0.7), (0.8, 1.1), (1.2, 1.5), (1.6, 1.9)))
    assert shares_of(tmp_path, Mode.SINGLE, 1) == [
        "  input            75.0 %   waiting for the next batch (tf.data)",
        "  compute          25.0 %",
        "  collectives       0.0 %   all-reduce in flight",
        "  bottleneck: input (docs/profiling.md: what to try)",
    ]


def test_a_run_with_little_to_wait_for_is_compute_bound(tmp_path: Path) -> None:
    traced(tmp_path, [*fetches((0.0, 0.1)), ("NcclAllReduce", int(1.0 * S_PS), int(0.2 * S_PS))])
    assert shares_of(tmp_path, Mode.MIRRORED, 1) == [
        "  input             5.0 %   waiting for the next batch (tf.data)",
        "  compute          85.0 %",
        "  collectives      10.0 %   all-reduce in flight",
        "  bottleneck: compute (docs/profiling.md: what to try)",
    ]


def test_multiworker_collectives_come_from_the_trace(tmp_path: Path) -> None:
    reduce = [("CollectiveReduceV2", int(s * S_PS), int(0.4 * S_PS)) for s in (0.1, 0.6, 1.1)]
    traced(tmp_path, [*fetches((0.0, 0.1)), *reduce])
    assert shares_of(tmp_path, Mode.MULTIWORKER, 3) == [
        "  input             5.0 %   waiting for the next batch (tf.data)",
        "  compute          35.0 %",
        "  collectives      60.0 %   all-reduce (MultiWorkerMirroredStrategy) in flight",
        "  bottleneck: collectives (docs/profiling.md: what to try)",
    ]


@pytest.mark.parametrize(
    ("offset", "spans", "collectives", "bottleneck"),
    [
        (0.5, [(0.0, 0.6), (0.7, 1.2)], "  collectives      55.0 %", "collectives"),
        (0.0, [(0.1, 0.2)], "  collectives       0.0 %", "compute"),  # all of it while fetching
        (1.5, [(0.0, 2.0)], "  collectives      25.0 %", "compute"),  # clipped to the window
    ],
)
def test_horovods_collectives_come_from_its_timeline_on_the_traces_clock(
    tmp_path: Path, offset: float, spans: list[tuple[float, float]], collectives: str,
    bottleneck: str,
) -> None:  # fmt: skip
    """The trace's own collective ops do not count under Horovod: its timeline does, begun
    ``offset`` s after the profile."""
    traced(tmp_path, [*fetches((0.0, 0.2)), ("CollectiveReduceV2", 0, 2 * S_PS)])
    timeline(tmp_path, offset, spans)
    lines = shares_of(tmp_path, Mode.HOROVOD, 2)
    assert lines[0] == "  input            10.0 %   waiting for the next batch (tf.data)"
    assert lines[2] == f"{collectives}   Horovod negotiation and all-reduce in flight"
    assert lines[3] == f"  bottleneck: {bottleneck} (docs/profiling.md: what to try)"


def test_a_timeline_still_being_written_is_read_once_it_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Horovod's writer thread flushes after stop_timeline on its own: a timeline that parses
    but is still growing (its first span alone) is not taken; the whole one is. The rest is
    written while the reader first waits (its sleep), so no verdict hangs on a thread's timing."""
    traced(tmp_path, [*fetches((0.0, 0.2)), ("CollectiveReduceV2", 0, 2 * S_PS)])
    timeline(tmp_path, 0.5, [(0.0, 0.6), (0.7, 1.2)])
    whole = (tmp_path / TIMELINE).read_text()
    timeline(tmp_path, 0.5, [(0.0, 0.6)])
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        if not waits:
            (tmp_path / TIMELINE).write_text(whole)
        waits.append(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    lines = shares_of(tmp_path, Mode.HOROVOD, 2)
    assert lines[2] == "  collectives      55.0 %   Horovod negotiation and all-reduce in flight"
    assert len(waits) == 2  # the growing file, then the whole one seen twice
