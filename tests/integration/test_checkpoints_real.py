"""Checkpoints against SIGKILL, with TensorFlow's real checkpoint files: a writer killed while
its new checkpoint is on disk but not yet renamed, or at any moment of a tight loop of writes,
leaves the previous checkpoint complete and loadable."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .jobs import BIN, SCRIPTS, clean_env

WRITER = SCRIPTS / "ckpt_writer.py"
pytestmark = [pytest.mark.tensorflow, pytest.mark.timeout(600)]


def writer(directory: Path, action: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(BIN / "python"), str(WRITER), str(directory), action],
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


def test_sigkill_mid_write_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    proc = writer(tmp_path, "write-and-hang")
    try:
        wait_line(proc, "writing")
        kill(proc)
    finally:
        proc.kill()
    leftovers = [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-ckpt-")]
    assert len(leftovers) == 1 and any(leftovers[0].iterdir())  # the half-done epoch 2
    assert check(tmp_path) == {"epoch": 1, "values": [1.0]}


def test_sigkill_at_any_moment_of_a_write_loop(tmp_path: Path) -> None:
    rng = random.Random(4)
    latest = 0
    for _ in range(3):
        proc = writer(tmp_path, "loop")
        try:
            wait_line(proc, "saved ")
            time.sleep(rng.uniform(0.0, 0.5))  # somewhere in the middle of some write
            kill(proc)
        finally:
            proc.kill()
        found = check(tmp_path)
        epoch = found["epoch"]
        assert isinstance(epoch, int) and epoch > latest
        assert found["values"] == [float(epoch)]  # the weights of the epoch it says it holds
        latest = epoch
