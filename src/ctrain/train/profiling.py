"""The traced window of one rank: TensorFlow's profiler and Horovod's timeline switched on for
the steps ``--profile`` names, this rank's own timing of them, and on the chief the table of
where the time went (train/breakdown.py).

``Profiler.begin`` and ``end`` are called around every training step (train/steps.py finds the
steps of a script that never calls ctrain; ``Context.profile`` gives the profiler to one that
does). The directory layout is launch/profile.py's.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from ctrain.names import Launched, Mode, Profiled
from ctrain.profile_window import StepWindow, parse_window
from ctrain.train import breakdown
from ctrain.util.fs import write_text

TIMELINE = "horovod-timeline.json"
WAIT_FOR_RANKS = 30.0  # seconds the chief waits for the other ranks' timings, at most


class Tools:
    """What a window switches on and off: TensorFlow's profiler, Horovod's timeline."""

    def __init__(self, rank_dir: Path, horovod: bool, timeline: Path) -> None:
        self.rank_dir = rank_dir
        self.horovod = horovod
        self.timeline = timeline
        self.timeline_note = ""

    def start(self, trace: bool) -> None:
        if trace:
            import tensorflow as tf

            tf.profiler.experimental.start(str(self.rank_dir))
        if self.horovod:
            import horovod.tensorflow as hvd

            try:
                hvd.start_timeline(str(self.timeline))
            except ValueError as exc:  # HOROVOD_TIMELINE set to a file by the user: theirs runs
                self.timeline_note = str(exc)

    def stop(self, trace: bool) -> None:
        if self.horovod and not self.timeline_note:
            import horovod.tensorflow as hvd

            hvd.stop_timeline()
        if trace:
            import tensorflow as tf

            tf.profiler.experimental.stop()


class Profiler:
    """One rank's window. Steps count from 1 over the whole run, as ``--profile`` does."""

    def __init__(
        self,
        window: StepWindow,
        run: Path,
        rank: int,
        size: int,
        trace: bool,
        mode: Mode,
        tools: Tools | None = None,
        clock: Callable[[], float] = time.perf_counter,
        out: TextIO = sys.stderr,
        wait: float = WAIT_FOR_RANKS,
    ) -> None:
        self.window = window
        self.run = run
        self.rank = rank
        self.size = size
        self.trace = trace
        self.mode = mode
        self.tools = tools or Tools(run / f"rank-{rank}", mode is Mode.HOROVOD, run / TIMELINE)
        self.clock = clock
        self.out = out
        self.wait = wait  # seconds to wait for the other ranks' timings, at most
        self.step = 0
        self.started: float | None = None
        self.done = False

    def begin(self) -> None:
        """A training step starts."""
        self.step += 1
        if self.step == self.window.first and not self.done:
            self.run.mkdir(parents=True, exist_ok=True)
            self.tools.start(self.trace)
            self.started = self.clock()

    def end(self) -> None:
        """The current training step ended."""
        if self.step == self.window.last and self.started is not None and not self.done:
            self._close(self.step)

    def finish(self) -> None:
        """The script ends: a window cut short is closed; on the chief, a window never reached
        is said in one line."""
        if self.done:
            return
        if self.started is not None:
            self._close(self.step)
        elif self.rank == 0:
            print(
                f"ctrain: training ended after step {self.step}, before step "
                f"{self.window.first}: no trace (--profile {self.window})",
                file=self.out,
                flush=True,
            )
        self.done = True

    def _close(self, last: int) -> None:
        assert self.started is not None
        seconds = self.clock() - self.started
        self.tools.stop(self.trace)
        self.done = True
        steps = last - self.window.first + 1
        mine = breakdown.RankTime(self.rank, socket.gethostname(), steps, seconds)
        (self.run / "steps").mkdir(parents=True, exist_ok=True)
        write_text(self.run / "steps" / f"rank-{self.rank}.json", json.dumps(mine._asdict()))
        if self.rank == 0:
            times = rank_times(self.run / "steps", self.size, time.monotonic() + self.wait)
            text = self.report(times, last)
            write_text(self.run / "breakdown.txt", text + "\n")
            print(text, file=self.out, flush=True)

    def report(self, times: list[breakdown.RankTime], last: int) -> str:
        """The chief's table, from every rank's timing and its own trace."""
        shares = None
        where = self.run / f"rank-{self.rank}"
        xplane = breakdown.latest_xplane(where) if self.trace else None
        collectives_of = "all-reduce"
        if xplane is not None:
            trace = breakdown.read_xplane(xplane.read_bytes())
            collectives = trace.collectives
            if self.mode is Mode.HOROVOD and trace.started is not None:
                since = trace.started
                timeline = self._horovod_collectives()
                collectives = [(s - since, e - since) for s, e in timeline]
                collectives_of = "Horovod negotiation and all-reduce"
            elif self.mode is Mode.MULTIWORKER:
                collectives_of = "all-reduce (MultiWorkerMirroredStrategy)"
            shares = breakdown.shares(trace.window, trace.inputs, collectives)
        steps_text = f"{self.window}" if last == self.window.last else f"{self.window.first}-{last}"
        text = breakdown.table(steps_text, times, self.size, shares, collectives_of, str(self.run))
        if self.tools.timeline_note:
            text += f"\n  no Horovod timeline: {self.tools.timeline_note}"
        return text

    def _horovod_collectives(self) -> list[breakdown.Interval]:
        """The timeline's collectives once Horovod's writer thread, which flushes on its own
        after ``stop_timeline``, has left the file unchanged for one look (a file read while it
        is still written may parse, and miss the last steps' collectives)."""
        path = self.tools.timeline
        deadline = time.monotonic() + 5.0
        seen: str | None = None
        while True:
            try:
                text = path.read_text(encoding="utf-8")
                if text == seen:
                    return breakdown.read_horovod_timeline(text)
                seen = text
            except (OSError, ValueError):
                seen = None
            if time.monotonic() > deadline:
                return []
            time.sleep(0.2)


def rank_times(folder: Path, size: int, deadline: float) -> list[breakdown.RankTime]:
    """Every rank's timing as they arrive, until all ``size`` are there or ``deadline``."""
    while True:
        times = []
        for path in sorted(folder.glob("rank-*.json")):
            try:
                times.append(breakdown.RankTime(**json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, TypeError):
                continue
        if len(times) >= size or time.monotonic() > deadline:
            return sorted(times)
        time.sleep(0.1)


def from_environ(environ: Mapping[str, str]) -> Profiler | None:
    """The profiler ``ctrain launch --profile`` asked for in this process, if any."""
    decided = Profiled.from_env(environ)
    if decided is None:
        return None
    launched = Launched.from_env(environ) or Launched(
        mode=Mode.SINGLE,
        rank=0,
        size=1,
        local_rank=0,
        local_size=1,
        collective="",
        collective_timeout=0,
    )
    window, run = parse_window(decided.steps), Path(decided.run)
    return Profiler(window, run, launched.rank, launched.size, decided.trace, launched.mode)
