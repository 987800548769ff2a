"""Checkpoints against SIGKILL, with TensorFlow's real checkpoint files: a writer killed at each
point of a write (stopped there by the writer itself, which says so: no timing) leaves the
latest complete checkpoint loadable, and a restarted writer goes on from it."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.real_runs import BIN, SCRIPTS, clean_env

WRITER = SCRIPTS / "ckpt_writer.py"
pytestmark = [pytest.mark.tensorflow, pytest.mark.timeout(600)]


def writer(directory: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(BIN / "python"), str(WRITER), str(directory), *args],
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="3"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def check(directory: Path) -> dict[str, object]:
    done = subprocess.run(
        [str(BIN / "python"), str(WRITER), str(directory), "check"],
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def wait_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 180) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for text in proc.stdout:
        if text.startswith(prefix):
            return
        assert time.monotonic() < deadline
    raise AssertionError(f"the writer ended before printing {prefix!r}")


def kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def leftovers(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if p.name.startswith(".tmp-ckpt-")]


# the point of the write of epoch 4 where the writer is killed -> the latest complete epoch then
POINTS = {"state": 3, "manifest": 3, "rename": 3, "cleanup": 4}


@pytest.mark.parametrize(("point", "latest"), POINTS.items())
def test_sigkill_at_each_point_of_a_write(tmp_path: Path, point: str, latest: int) -> None:
    proc = writer(tmp_path, "loop", point, "4")
    try:
        wait_line(proc, f"paused {point} 4")
        kill(proc)
    finally:
        proc.kill()
    assert len(leftovers(tmp_path)) == (0 if point == "cleanup" else 1)
    assert check(tmp_path) == {"epoch": latest, "values": [float(latest)]}
    # a new writer removes the leftovers and goes on from there
    proc = writer(tmp_path, "loop", "state", str(latest + 2))
    try:
        wait_line(proc, f"paused state {latest + 2}")
        kill(proc)
    finally:
        proc.kill()
    assert len(leftovers(tmp_path)) == 1  # the new writer's own, of epoch latest + 2
    assert check(tmp_path) == {"epoch": latest + 1, "values": [float(latest + 1)]}
