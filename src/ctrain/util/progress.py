"""Progress of a pull, a push or a build: a live bar on a terminal, one line per finished layer
or step in a batch log, or nothing.

``choose_mode`` is the one place that decides between them (the ``progress`` setting and
whether the stream is a terminal). ``Board`` is pure: events and the time in, text out; it is
tested with golden frames. ``Reporter`` writes a board's text to a stream. What the engine's
JSON stream and a build's output say become ``Event``s through ``docker_event`` and
``build_event``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TextIO

from ctrain.names import PROGRESS_MODES, ProgressMode
from ctrain.util.fs import human

Mode = ProgressMode
Phase = Literal["waiting", "moving", "done", "present", "step"]

CLEAR = "\r\x1b[K"  # back to the start of the line, erase it
BAR_CELLS = 20
REDRAW_EVERY = 0.1  # seconds between two frames of the bar

_WAITING = ("Pulling fs layer", "Waiting", "Preparing")
_MOVING = ("Downloading", "Pushing", "Extracting")
_FETCHED = ("Verifying Checksum", "Download complete")
_DONE = ("Pull complete", "Pushed")
_PRESENT = ("Already exists", "Layer already exists")
_STEPS = (
    re.compile(r"^Step (\d+)/(\d+) : (.*)$"),  # docker's classic builder
    re.compile(r"^STEP (\d+)/(\d+): (.*)$"),  # podman (buildah)
    re.compile(r"^#\d+ \[(?:[^\]]* )?(\d+)/(\d+)\] (.*)$"),  # BuildKit, plain output
)


def choose_mode(setting: str, isatty: bool, term: str | None) -> Mode:
    """``auto``: a bar on a terminal (not TERM=dumb), else lines; otherwise the setting."""
    if setting in PROGRESS_MODES:
        return setting
    return "bar" if isatty and term != "dumb" else "lines"


@dataclass(frozen=True)
class Event:
    key: str  # a layer id, or a step's number
    phase: Phase
    current: int = 0  # bytes so far (moving), or the step's number
    total: int = 0  # the layer's bytes (0: not known yet), or the number of steps
    text: str = ""  # what a step does


def docker_event(message: Mapping[str, object]) -> Event | None:
    """The event in one message of the engine's pull or push stream; None for the others."""
    status, key = message.get("status"), message.get("id")
    if not isinstance(status, str) or not isinstance(key, str):
        return None
    detail = message.get("progressDetail")
    numbers = detail if isinstance(detail, dict) else {}
    current, total = numbers.get("current"), numbers.get("total")
    if status in _MOVING and isinstance(current, int):
        phase: Phase = "moving"
        size = total if isinstance(total, int) else 0
        if status == "Extracting":  # the bytes are all here: only unpacking is left
            return Event(key, phase, -1, size)
        return Event(key, phase, current, size)
    if status in _FETCHED:
        return Event(key, "moving", -1, 0)
    if status in _DONE:
        return Event(key, "done")
    if status in _PRESENT or status.startswith("Mounted from"):
        return Event(key, "present")
    if status in _WAITING:
        return Event(key, "waiting")
    return None


def build_event(line: str) -> Event | None:
    """A build step starting (``Step 3/7 : RUN ...``, podman's ``STEP 3/7: ...``, BuildKit's
    ``#6 [2/5] RUN ...``); None for every other line."""
    for pattern in _STEPS:
        step_line = pattern.match(line.rstrip("\n"))
        if step_line:
            number, steps, text = step_line.groups()
            return Event(number, "step", int(number), int(steps), " ".join(text.split()))
    return None


@dataclass
class _Layer:
    current: int = 0
    total: int = 0
    state: Phase = "waiting"


class Board:
    """What to show for a stream of events, given the time each arrives (pure)."""

    def __init__(self, mode: Mode, verb: str, start: float, width: int = 80) -> None:
        self.mode, self.verb, self.start, self.width = mode, verb, start, width
        self.layers: dict[str, _Layer] = {}
        self.step: Event | None = None
        self.drawn_at: float | None = None

    def feed(self, event: Event, now: float) -> str:
        """The text to write for ``event`` ("" for none)."""
        if self.mode == "off":
            return ""
        if event.phase == "step":
            return self._step(event, now)
        layer = self.layers.setdefault(event.key, _Layer())
        finished = event.phase in ("done", "present") and layer.state not in ("done", "present")
        if event.phase == "moving" and event.current < 0:  # all its bytes are here
            layer.total = layer.total or event.total
            layer.current = layer.total
        elif event.phase == "moving":
            layer.current, layer.total = event.current, event.total or layer.total
        if event.phase in ("done", "present"):
            layer.current = layer.total
        layer.state = event.phase
        if self.mode == "lines":
            return self._layer_line(event.key, layer) if finished else ""
        if finished or self.drawn_at is None or now - self.drawn_at >= REDRAW_EVERY:
            self.drawn_at = now
            return CLEAR + self.frame(now)
        return ""

    def close(self, now: float) -> str:
        """The last frame, ended by a newline (bar mode; nothing otherwise)."""
        if self.mode != "bar" or self.drawn_at is None:
            return ""
        return CLEAR + self.frame(now) + "\n"

    def frame(self, now: float) -> str:
        """One line: the bar, how far, how much, how many layers are done and how fast."""
        if self.step is not None:
            step = self.step
            head = f"{self.verb} {_bar(step.current - 1, step.total)} step {step.current}/"
            return _fit(f"{head}{step.total}: {step.text}", self.width)
        moved = sum(layer.current for layer in self.layers.values())
        total = sum(layer.total for layer in self.layers.values())
        done = sum(layer.state in ("done", "present") for layer in self.layers.values())
        elapsed = max(now - self.start, 1e-3)
        percent = f"{100 * moved // total:3d}%" if total else "  ?%"
        return _fit(
            f"{self.verb} {_bar(moved, total)} {percent} {human(moved)}/{human(total)} "
            f"{done}/{len(self.layers)} layers {human(moved / elapsed)}/s",
            self.width,
        )

    def _layer_line(self, key: str, layer: _Layer) -> str:
        done = sum(other.state in ("done", "present") for other in self.layers.values())
        what = human(layer.total) if layer.state == "done" else "already there"
        return f"{self.verb}: layer {key[:12]} {what} ({done}/{len(self.layers)})\n"

    def _step(self, event: Event, now: float) -> str:
        if self.step is not None and self.step.key == event.key:
            return ""
        self.step = event
        if self.mode == "lines":
            return f"{self.verb}: step {event.current}/{event.total}: {event.text}\n"
        self.drawn_at = now
        return CLEAR + self.frame(now)


def _bar(part: int, whole: int) -> str:
    filled = BAR_CELLS * min(max(part, 0), whole) // whole if whole > 0 else 0
    return "[" + "#" * filled + "-" * (BAR_CELLS - filled) + "]"


def _fit(text: str, width: int) -> str:
    """``text`` cut to leave the terminal's last column free (no wrapping)."""
    return text[: width - 1]


class Reporter:
    """Writes what a ``Board`` says to ``stream`` as events come; ``close`` ends the bar."""

    def __init__(
        self, board: Board, stream: TextIO, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.board, self.stream, self.clock = board, stream, clock

    def __call__(self, event: Event) -> None:
        self._write(self.board.feed(event, self.clock()))

    def close(self) -> None:
        self._write(self.board.close(self.clock()))

    def _write(self, text: str) -> None:
        if text:
            self.stream.write(text)
            self.stream.flush()


def reporter(setting: str, verb: str, stream: TextIO, environ: Mapping[str, str]) -> Reporter:
    """The reporter for ``stream``: the mode from ``setting`` and whether it is a terminal."""
    mode = choose_mode(setting, stream.isatty(), environ.get("TERM"))
    return Reporter(Board(mode, verb, time.monotonic(), _columns(stream, environ)), stream)


def _columns(stream: TextIO, environ: Mapping[str, str]) -> int:
    """The terminal's width, else $COLUMNS, else 80 (at least 40)."""
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        text = environ.get("COLUMNS", "")
        width = int(text) if text.isdigit() else 0
    return width if width >= 40 else 80
