"""Reading TensorFlow's trace (train/breakdown.py's read_xplane) from an XSpace laid out as the
profiler writes it (tests/support/xspace.py)."""

from __future__ import annotations

import pytest
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from ctrain.train.breakdown import Trace, read_xplane
from tests.support.xspace import MS_PS, Event, add_environment, add_plane

START_NS = 1_764_150_000_000_000_000
STOP_NS = START_NS + 2_500_000_000  # 2.5 s later


def near(*values: float) -> tuple[object, ...]:
    return tuple(pytest.approx(v, rel=1e-9, abs=1e-12) for v in values)


HOST: dict[int, list[Event]] = {
    1_000_000: [  # 1 ms after the start
        ("IteratorGetNextOp::DoCompute", 0, 2 * MS_PS),
        ("MatMul", 3 * MS_PS, MS_PS),
        ("CollectiveReduceV2", 5 * MS_PS, MS_PS),
        ("", 7 * MS_PS, MS_PS),
    ],
    4_000_000: [("IteratorGetNextOp::DoCompute", 1, MS_PS // 2)],
}
GPU: dict[int, list[Event]] = {
    2_000_000: [
        ("volta_sgemm_128x64_nn", 0, MS_PS),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 10 * MS_PS, MS_PS // 2),
    ],
}


def test_a_trace_in_seconds_from_the_profiles_start() -> None:
    space = xplane_pb2.XSpace()
    add_environment(space, {"profile_start_time": START_NS, "profile_stop_time": STOP_NS})
    add_plane(space, "/host:CPU", HOST)
    add_plane(space, "/device:GPU:0", GPU)
    assert read_xplane(space.SerializeToString()) == Trace(
        near(0.0, 2.5),
        [near(0.001, 0.003), near(0.004 + 1e-12, 0.0045 + 1e-12)],
        [near(0.006, 0.007), near(0.012, 0.0125)],
        pytest.approx(1_764_150_000.0, rel=1e-15),
    )


@pytest.mark.parametrize(
    "stats",
    [{}, {"profile_start_time": START_NS}, {"profile_stop_time": START_NS}],
)
def test_without_the_profiles_bounds_the_events_span_the_window(stats: dict[str, int]) -> None:
    space = xplane_pb2.XSpace()
    add_environment(space, stats)
    add_plane(space, "/host:CPU", {1_000_000: [("MatMul", 250_000, 3 * MS_PS)]})
    add_plane(space, "/device:GPU:0", {2_000_000: [("ncclKernel_AllReduce", 0, MS_PS)]})
    assert read_xplane(space.SerializeToString()) == Trace(
        near(0.001 + 25e-8, 0.004 + 25e-8), [], [near(0.002, 0.003)], None
    )


def test_a_single_instant_is_a_trace() -> None:
    space = xplane_pb2.XSpace()
    add_plane(space, "/host:CPU", {5_000_000: [("IteratorGetNextOp::DoCompute", 0, 0)]})
    assert read_xplane(space.SerializeToString()) == Trace(
        near(0.005, 0.005), [near(0.005, 0.005)], [], None
    )


def test_a_trace_without_events_is_refused() -> None:
    space = xplane_pb2.XSpace()
    add_environment(space, {"profile_start_time": START_NS, "profile_stop_time": START_NS + 1})
    add_plane(space, "/host:CPU", {1_000_000: []})
    for data in (b"", space.SerializeToString()):
        with pytest.raises(ValueError, match="^the trace holds no events$"):
            read_xplane(data)
