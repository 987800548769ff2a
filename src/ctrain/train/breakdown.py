"""Where a traced window's time went: input, compute, collectives, as one short table.

The shares are wall time within the window, read from the chief's trace:

- input: time with a ``tf.data`` fetch in progress (``IteratorGetNextOp::DoCompute`` in
  TensorFlow's trace: the step waits for its batch);
- collectives: time with a collective in flight and no input fetch: TensorFlow's
  ``CollectiveReduceV2`` & co. (MultiWorkerMirroredStrategy), NCCL's kernels and all-reduce
  ops (MirroredStrategy on GPUs), and for Horovod its own timeline (negotiation, which waits
  for the slowest rank, and the all-reduce itself);
- compute: the rest.

Overlapping intervals count once, so the three add up to the window. Time per step is every
rank's own timing of the window (train/profiling.py), the slowest rank named.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

Interval = tuple[float, float]  # seconds, start < end

INPUT_EVENTS = ("IteratorGetNextOp::DoCompute",)
COLLECTIVE_EVENT = re.compile(
    r"Collective(Reduce|Gather|Bcast|AllToAll)|NcclAllReduce|nccl(Dev)?Kernel|AllReduce",
)
SHARES = ("input", "compute", "collectives")


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, non-overlapping intervals covering the same time."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(intervals: Iterable[Interval]) -> float:
    return sum(end - start for start, end in union(intervals))


def clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    low, high = window
    return [(max(s, low), min(e, high)) for s, e in intervals if e > low and s < high]


def subtract(intervals: Iterable[Interval], taken: Sequence[Interval]) -> list[Interval]:
    """``intervals`` less the time ``taken`` covers."""
    left: list[Interval] = []
    cut = union(taken)
    for start, end in union(intervals):
        point = start
        for t_start, t_end in cut:
            if t_end <= point or t_start >= end:
                continue
            if t_start > point:
                left.append((point, t_start))
            point = max(point, t_end)
        if point < end:
            left.append((point, end))
    return left


class Shares(NamedTuple):
    """Fractions of the window, adding up to 1."""

    input: float
    compute: float
    collectives: float

    @property
    def bottleneck(self) -> str:
        return max(SHARES, key=lambda name: float(getattr(self, name)))


def shares(window: Interval, inputs: Sequence[Interval], collectives: Sequence[Interval]) -> Shares:
    """The window's time split into input, collectives (outside input) and compute."""
    span = window[1] - window[0]
    if span <= 0:
        raise ValueError("an empty window")
    fetch = union(clip(inputs, window))
    talk = subtract(clip(collectives, window), fetch)
    waiting, talking = length(fetch) / span, length(talk) / span
    return Shares(waiting, max(0.0, 1.0 - waiting - talking), talking)


class RankTime(NamedTuple):
    """One rank's timing of the window (train/profiling.py writes it)."""

    rank: int
    host: str
    steps: int
    seconds: float

    @property
    def per_step(self) -> float:
        return self.seconds / self.steps


class Trace(NamedTuple):
    """The intervals of one trace that the shares need, in seconds from the profiler's start,
    the span it ran, and when it started (seconds since the epoch; None if not recorded)."""

    window: Interval
    inputs: list[Interval]
    collectives: list[Interval]
    started: float | None


def read_xplane(data: bytes) -> Trace:
    """Input and collective intervals of TensorFlow's trace (an ``.xplane.pb``), in seconds
    from the start of the trace, and the span the profiler ran."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # TensorFlow's own reader

    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    inputs: list[Interval] = []
    collectives: list[Interval] = []
    first, last = float("inf"), 0.0
    bounds: dict[str, float] = {}
    for plane in space.planes:
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for stat in plane.stats:
            if stat_names.get(stat.metadata_id) in ("profile_start_time", "profile_stop_time"):
                bounds[stat_names[stat.metadata_id]] = stat.uint64_value * 1e-9
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                start = line.timestamp_ns * 1e-9 + event.offset_ps * 1e-12
                end = start + event.duration_ps * 1e-12
                first, last = min(first, start), max(last, end)
                name = names.get(event.metadata_id, "")
                if name in INPUT_EVENTS:
                    inputs.append((start, end))
                elif COLLECTIVE_EVENT.search(name):
                    collectives.append((start, end))
    if first > last:
        raise ValueError("the trace holds no events")
    started = bounds.get("profile_start_time")
    if started is not None and "profile_stop_time" in bounds:
        return Trace((0.0, bounds["profile_stop_time"] - started), inputs, collectives, started)
    return Trace((first, last), inputs, collectives, None)


def read_horovod_timeline(text: str) -> list[Interval]:
    """The intervals in which Horovod negotiated or ran a collective, from its timeline (a
    Chrome trace that Horovod may leave without its closing bracket), in seconds since the
    epoch (Horovod records its start in a metadata event), else since the timeline began."""
    body = text.strip().rstrip(",")
    if body and not body.endswith("]"):
        body += "]"
    events = json.loads(body) if body else []
    open_at: dict[tuple[object, object], list[float]] = {}
    intervals: list[Interval] = []
    base = 0.0
    for event in events:
        if not isinstance(event, dict):
            continue
        since = event.get("args", {}).get("start_time_since_epoch_in_micros")
        if event.get("ph") == "M" and isinstance(since, (int, float)):
            base = since * 1e-6
        if event.get("ph") not in ("B", "E"):
            continue
        key = (event.get("pid"), event.get("tid"))
        ts = base + float(event.get("ts", 0)) * 1e-6
        if event["ph"] == "B":
            open_at.setdefault(key, []).append(ts)
        elif open_at.get(key):
            intervals.append((open_at[key].pop(), ts))
    return union(intervals)


def latest_xplane(rank_dir: Path) -> Path | None:
    """The newest trace TensorFlow wrote under a rank's directory."""
    traces = sorted(rank_dir.glob("plugins/profile/*/*.xplane.pb"))
    return traces[-1] if traces else None


def table(
    steps: str,
    times: Sequence[RankTime],
    size: int,
    found: Shares | None,
    collectives_of: str,
    where: str,
) -> str:
    """The chief's short table."""
    chief = next((t for t in times if t.rank == 0), times[0])
    slowest = max(times, key=lambda t: t.per_step)
    lines = [f"ctrain: profile of steps {steps} ({chief.steps} steps), {size} rank(s), in {where}"]
    step_line = f"  time per step  {chief.per_step * 1e3:9.1f} ms on rank 0"
    if len(times) > 1:
        step_line += (
            f"; slowest rank {slowest.rank} ({slowest.host}) {slowest.per_step * 1e3:.1f} ms"
        )
    if len(times) < size:
        step_line += f" ({len(times)} of {size} ranks reported)"
    lines.append(step_line)
    if found is None:
        lines.append("  no trace on rank 0: the shares need one (--profile-ranks auto)")
        return "\n".join(lines)
    notes = {
        "input": "waiting for the next batch (tf.data)",
        "compute": "",
        "collectives": f"{collectives_of} in flight",
    }
    for name in SHARES:
        share = float(getattr(found, name))
        lines.append(f"  {name:<13}{share * 100:8.1f} %   {notes[name]}".rstrip())
    lines.append(f"  bottleneck: {found.bottleneck} (docs/profiling.md: what to try)")
    return "\n".join(lines)
