"""util/progress.py: the mode decision as a truth table, the engine's messages and build lines
as events, and the frames a board draws for scripted pulls, pushes and builds (golden file
tests/unit/golden/progress.txt; a redraw is written there as ``<CR>``). Regenerate with

    CTRAIN_REGEN_GOLDEN=1 pytest tests/unit/util/test_progress.py

and read the diff: the bar, the percentages and the rates are checked there by eye.
"""

from __future__ import annotations

import io
import itertools
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

from ctrain.names import PROGRESS_CHOICES
from ctrain.util.progress import (
    CLEAR,
    Board,
    Event,
    Mode,
    Reporter,
    build_event,
    choose_mode,
    docker_event,
    reporter,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "progress.txt"
MIB = 1 << 20


@pytest.mark.parametrize(
    ("setting", "isatty", "term"),
    list(itertools.product(PROGRESS_CHOICES, (True, False), ("xterm", "dumb", None))),
)
def test_choose_mode(setting: str, isatty: bool, term: str | None) -> None:
    expected = {"bar": "bar", "lines": "lines", "off": "off"}.get(setting)
    if setting == "auto":
        expected = "bar" if isatty and term != "dumb" else "lines"
    assert choose_mode(setting, isatty, term) == expected


def layer(key: str, status: str, current: int | None = None, total: int | None = None) -> dict:
    detail = {} if current is None else {"current": current, "total": total}
    return {"status": status, "progressDetail": detail, "id": key}


PULL = [
    {"status": "Pulling from ctrain-test/sdk", "id": "1"},
    layer("aaaaaaaaaaaa1", "Already exists"),
    layer("bbbbbbbbbbbb2", "Pulling fs layer"),
    layer("cccccccccccc3", "Pulling fs layer"),
    layer("bbbbbbbbbbbb2", "Downloading", 1 * MIB, 3 * MIB),
    layer("cccccccccccc3", "Downloading", 1 * MIB, 1 * MIB),
    layer("cccccccccccc3", "Download complete"),
    layer("bbbbbbbbbbbb2", "Downloading", 2 * MIB, 3 * MIB),
    layer("bbbbbbbbbbbb2", "Verifying Checksum"),
    layer("bbbbbbbbbbbb2", "Extracting", 3 * MIB, 3 * MIB),
    layer("bbbbbbbbbbbb2", "Pull complete"),
    layer("cccccccccccc3", "Extracting", 1 * MIB, 1 * MIB),
    layer("cccccccccccc3", "Pull complete"),
    {"status": "Digest: sha256:" + "d" * 64},
    {"status": "Status: Downloaded newer image for r/x:1"},
]

PUSH = [
    {"status": "The push refers to repository [127.0.0.1:5000/x]"},
    layer("aaaaaaaaaaaa1", "Preparing"),
    layer("bbbbbbbbbbbb2", "Preparing"),
    layer("aaaaaaaaaaaa1", "Layer already exists"),
    layer("bbbbbbbbbbbb2", "Pushing", 512 * 1024, 2 * MIB),
    layer("bbbbbbbbbbbb2", "Pushing", 2 * MIB, 2 * MIB),
    layer("bbbbbbbbbbbb2", "Pushed"),
]

BUILD = """Sending build context to Docker daemon  5.12kB
Step 1/3 : FROM base:1
 ---> 1a2b3c
Step 2/3 : RUN   echo   hi
 ---> Running in 4d5e6f
hi
Step 3/3 : LABEL a=b
Successfully built 7a8b9c
"""


def render(mode: Mode, verb: str, events: Iterable[Event | None], every: float) -> str:
    """The text a board writes for ``events`` arriving ``every`` seconds apart."""
    board = Board(mode, verb, start=100.0, width=80)
    now = 100.0
    out = []
    for event in events:
        now += every
        if event is not None:
            out.append(board.feed(event, now))
    out.append(board.close(now))
    return "".join(out).replace(CLEAR, "<CR>")


def scenarios() -> str:
    pulls = [docker_event(m) for m in PULL]
    pushes = [docker_event(m) for m in PUSH]
    steps = [build_event(line) for line in BUILD.splitlines(keepends=True)]
    parts = []
    for title, mode, verb, events, every in (
        ("pull, bar, an event every 0.5 s", "bar", "pull", pulls, 0.5),
        (
            "pull, bar, an event every 0.01 s (redrawn at most every 0.1 s)",
            "bar",
            "pull",
            pulls,
            0.01,
        ),
        ("pull, lines", "lines", "pull", pulls, 0.5),
        ("pull, off", "off", "pull", pulls, 0.5),
        ("push, bar", "bar", "push", pushes, 0.5),
        ("push, lines", "lines", "push", pushes, 0.5),
        ("build, bar", "bar", "build", steps, 1.0),
        ("build, lines", "lines", "build", steps, 1.0),
    ):
        text = render(mode, verb, events, every)  # type: ignore[arg-type]
        parts.append(f"== {title}\n{text.replace('<CR>', chr(10) + '<CR>')}\n")
    return "".join(parts)


def test_frames_match_the_golden_file() -> None:
    text = scenarios()
    if os.environ.get("CTRAIN_REGEN_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_lines_mode_writes_one_line_per_finished_layer_and_no_carriage_return() -> None:
    text = render("lines", "pull", [docker_event(m) for m in PULL], 0.5)
    assert text.count("\n") == 3 and "\r" not in text and "<CR>" not in text


def test_a_bar_ends_at_100_percent_with_every_layer_done() -> None:
    text = render("bar", "pull", [docker_event(m) for m in PULL], 0.5)
    last = text.split("<CR>")[-1]
    assert last.endswith("\n") and " 100% " in last and "3/3 layers" in last
    assert "4.0 MiB/4.0 MiB" in last


@pytest.mark.parametrize(
    ("message", "event"),
    [
        ({"status": "Pulling from x", "id": "1"}, None),
        ({"status": "Digest: sha256:1"}, None),
        (layer("k", "Downloading", 5, 10), Event("k", "moving", 5, 10)),
        (layer("k", "Pushing", 5, 10), Event("k", "moving", 5, 10)),
        (layer("k", "Extracting", 5, 10), Event("k", "moving", -1, 10)),
        (layer("k", "Download complete"), Event("k", "moving", -1, 0)),
        (layer("k", "Pull complete"), Event("k", "done")),
        (layer("k", "Pushed"), Event("k", "done")),
        (layer("k", "Already exists"), Event("k", "present")),
        (layer("k", "Mounted from library/x"), Event("k", "present")),
        (layer("k", "Waiting"), Event("k", "waiting")),
    ],
)
def test_docker_event(message: dict, event: Event | None) -> None:
    assert docker_event(message) == event


@pytest.mark.parametrize(
    ("line", "event"),
    [
        ("Step 2/7 : RUN  a  b\n", Event("2", "step", 2, 7, "RUN a b")),
        ("STEP 1/3: FROM x\n", Event("1", "step", 1, 3, "FROM x")),
        ("#6 [stage 2/5] COPY a /a\n", Event("2", "step", 2, 5, "COPY a /a")),
        ("#6 [3/5] RUN x\n", Event("3", "step", 3, 5, "RUN x")),
        (" ---> Running in 4d5e\n", None),
        ("#6 DONE 0.1s\n", None),
    ],
)
def test_build_event(line: str, event: Event | None) -> None:
    assert build_event(line) == event


def test_reporter_writes_frames_and_a_pipe_gets_lines() -> None:
    stream = io.StringIO()  # not a terminal: auto means lines
    show = reporter("auto", "pull", stream, {"TERM": "xterm"})
    for message in PULL:
        event = docker_event(message)
        if event is not None:
            show(event)
    show.close()
    assert stream.getvalue().splitlines() == [
        "pull: layer aaaaaaaaaaaa already there (1/1)",
        "pull: layer bbbbbbbbbbbb 3.0 MiB (2/3)",
        "pull: layer cccccccccccc 1.0 MiB (3/3)",
    ]


def test_reporter_uses_its_clock() -> None:
    stream = io.StringIO()
    times = iter([1.0, 1.05, 1.5, 2.0])
    show = Reporter(Board("bar", "pull", 0.0), stream, lambda: next(times))
    show(Event("a", "moving", 1, 4))
    show(Event("a", "moving", 2, 4))  # 0.05 s later: not redrawn
    show(Event("a", "moving", 3, 4))
    show.close()
    assert stream.getvalue().count(CLEAR) == 3 and stream.getvalue().endswith("\n")


@pytest.mark.parametrize("command", ["pull", "push", "build"])
def test_the_option_and_its_variable_are_in_help(command: str) -> None:
    from click.testing import CliRunner

    from ctrain.cli import main

    text = CliRunner().invoke(main, [command, "--help"], catch_exceptions=False).output
    assert "--progress [auto|bar|lines|off]" in text and "CTRAIN_PROGRESS" in text
