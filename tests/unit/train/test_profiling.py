"""One rank's traced window (train/profiling.py) and the steps that drive it (train/steps.py),
with TensorFlow's profiler and Horovod's timeline replaced by a recorder: what is switched on
and off at which step, what every rank writes, what the chief prints."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ctrain.names import Launched, Mode, Profiled
from ctrain.profile_window import StepWindow
from ctrain.train.profiling import Profiler, Tools, from_environ
from ctrain.train.steps import Steps


class Recorder(Tools):
    def __init__(self, run: Path) -> None:
        super().__init__(run / "rank-0", False, run / "timeline.json")
        self.calls: list[str] = []

    def start(self, trace: bool) -> None:
        self.calls.append(f"start trace={trace}")

    def stop(self, trace: bool) -> None:
        self.calls.append(f"stop trace={trace}")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def profiler(tmp_path: Path, window: StepWindow, rank: int = 0, size: int = 1) -> Profiler:
    run = tmp_path / "run"
    return Profiler(
        window, run, rank, size, True, Mode.SINGLE, Recorder(run), Clock(), io.StringIO(), 0.3
    )


def steps(p: Profiler, count: int) -> None:
    for _ in range(count):
        p.begin()
        p.end()


def test_the_window_switches_on_at_its_first_step_and_off_after_its_last(tmp_path: Path) -> None:
    p = profiler(tmp_path, StepWindow(3, 4))
    tools = p.tools
    assert isinstance(tools, Recorder)
    steps(p, 2)
    assert tools.calls == []
    p.begin()
    assert tools.calls == ["start trace=True"]
    steps(p, 1)
    p.end()
    assert tools.calls == ["start trace=True", "stop trace=True"]
    steps(p, 5)
    p.finish()
    assert len(tools.calls) == 2
    mine = json.loads((p.run / "steps" / "rank-0.json").read_text())
    assert mine["rank"] == 0 and mine["steps"] == 2 and mine["seconds"] == pytest.approx(0.25)
    out = p.out
    assert isinstance(out, io.StringIO)
    printed = out.getvalue()
    assert printed.startswith("ctrain: profile of steps 3-4 (2 steps), 1 rank(s)")
    assert "no trace on rank 0" in printed  # the recorder wrote none
    assert (p.run / "breakdown.txt").read_text() == printed


def test_training_that_ends_before_the_window_says_so_on_the_chief(tmp_path: Path) -> None:
    p = profiler(tmp_path, StepWindow(20, 25))
    steps(p, 7)
    p.finish()
    out = p.out
    assert isinstance(out, io.StringIO)
    assert out.getvalue() == (
        "ctrain: training ended after step 7, before step 20: no trace (--profile 20-25)\n"
    )
    assert not p.run.exists()


def test_another_rank_says_nothing_and_writes_only_its_timing(tmp_path: Path) -> None:
    p = profiler(tmp_path, StepWindow(2, 2), rank=3, size=4)
    steps(p, 3)
    p.finish()
    out = p.out
    assert isinstance(out, io.StringIO)
    assert out.getvalue() == ""
    assert sorted(f.name for f in p.run.rglob("*") if f.is_file()) == ["rank-3.json"]


def test_a_window_cut_short_is_closed_at_exit(tmp_path: Path) -> None:
    p = profiler(tmp_path, StepWindow(3, 10))
    steps(p, 5)
    p.finish()
    tools = p.tools
    assert isinstance(tools, Recorder)
    assert tools.calls == ["start trace=True", "stop trace=True"]
    out = p.out
    assert isinstance(out, io.StringIO)
    assert out.getvalue().startswith("ctrain: profile of steps 3-5 (3 steps)")


def test_no_profiler_without_the_launchs_variables() -> None:
    assert from_environ({}) is None
    launched = Launched(
        mode=Mode.HOROVOD,
        rank=2,
        size=3,
        local_rank=0,
        local_size=1,
        collective="auto",
        collective_timeout=600,
    ).to_env()
    assert from_environ(launched) is None  # launched, but not asked to profile
    found = from_environ({**launched, **Profiled("4-6", "/p/run", False).to_env()})
    assert found is not None
    assert (found.window, found.run, found.rank, found.size, found.trace, found.mode) == (
        StepWindow(4, 6),
        Path("/p/run"),
        2,
        3,
        False,
        Mode.HOROVOD,
    )
    assert found.tools.horovod


class Counted:
    """A profiler that only records begin and end."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def begin(self) -> None:
        self.events.append("begin")

    def end(self) -> None:
        self.events.append("end")


def hooked(counted: Counted) -> Steps:
    return Steps(counted)  # type: ignore[arg-type]  # the profiler's two methods suffice


def test_the_function_that_applies_gradients_is_the_step(tmp_path: Path) -> None:
    counted = Counted()
    s = hooked(counted)

    def first_call() -> None:  # tracing: a nested function, then apply_gradients inside
        s.calling("inner", lambda: None)
        s.applied("train_function")

    s.calling("train_function", first_call)
    assert counted.events == ["begin", "end"]  # the first call was step 1
    s.calling("train_function", lambda: None)
    s.calling("evaluate_function", lambda: None)  # another function: no step
    s.calling("train_function", lambda: None)
    assert counted.events == ["begin", "end"] * 3


def test_a_step_that_raises_still_ends() -> None:
    counted = Counted()
    s = hooked(counted)
    s.applied("step")

    def fails() -> None:
        raise RuntimeError("out of memory")

    with pytest.raises(RuntimeError):
        s.calling("step", fails)
    assert counted.events == ["begin", "end"]


def test_eager_steps_end_at_each_apply() -> None:
    counted = Counted()
    s = hooked(counted)
    s.applied(None)
    s.applied(None)
    assert counted.events == ["begin", "end", "begin", "end", "begin"]
    s.calling("some_function", lambda: None)  # no step function known: calls are no steps
    assert counted.events == ["begin", "end", "begin", "end", "begin"]
