"""TensorFlow's trace (an XSpace) laid out as the profiler writes it, for the tests of its
readers: the session's start and stop (ns since the epoch) as stats of the "Task Environment"
plane, events on the host's and the GPU's planes with their names in the plane's event
metadata, each line's timestamp in ns from the profile's start and the events' offsets and
durations in ps."""

from __future__ import annotations

from tensorflow.tsl.profiler.protobuf import xplane_pb2

MS_PS = 1_000_000_000  # a millisecond in ps

Event = tuple[str, int, int]  # name ("" for none in the metadata), offset and duration in ps


def add_plane(space: xplane_pb2.XSpace, name: str, lines: dict[int, list[Event]]) -> None:
    """A plane with one line per timestamp (ns), ids in the metadata as XPlaneBuilder gives."""
    plane = space.planes.add(id=len(space.planes), name=name)
    ids: dict[str, int] = {}
    for timestamp_ns, events in lines.items():
        line = plane.lines.add(id=len(plane.lines), name=f"thread {timestamp_ns}")
        line.timestamp_ns = timestamp_ns
        for event_name, offset_ps, duration_ps in events:
            if event_name and event_name not in ids:
                ids[event_name] = len(ids) + 1
                plane.event_metadata[ids[event_name]].id = ids[event_name]
                plane.event_metadata[ids[event_name]].name = event_name
            metadata_id = ids.get(event_name, 99)  # 99: an id without metadata
            line.events.add(metadata_id=metadata_id, offset_ps=offset_ps, duration_ps=duration_ps)


def add_environment(space: xplane_pb2.XSpace, stats: dict[str, int]) -> None:
    plane = space.planes.add(id=len(space.planes), name="Task Environment")
    for key, (name, value) in enumerate(stats.items(), start=1):
        plane.stat_metadata[key].id = key
        plane.stat_metadata[key].name = name
        plane.stats.add(metadata_id=key, uint64_value=value)
