"""A pull or build stopped by SIGTERM or SIGINT passes the signal to apptainer and waits for it:
apptainer removes its build-temp-* then (it cannot after SIGKILL), and ctrain exits 130 with
nothing half-written beside the target. Apptainer's temporary files go to a directory of ctrain's
own in $TMPDIR, removed however the step ends: what apptainer leaves (Apptainer 1.4.5 stopped
while it extracts layers can fail to remove its build-temp-*) goes with it."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from ctrain.util import proc
from tests.support import fake_apptainer
from tests.support.helpers import sandbox, start_ctrain, wait_for

# Like apptainer: build-temp-* in APPTAINER_TMPDIR, removed (after a moment) when SIGTERM or
# SIGINT stops it, left behind by SIGKILL; the second leaves it, read-only, as a failed removal
# does.
CLEANS_UP = """#!/bin/sh
work="$APPTAINER_TMPDIR/build-temp-$$"
trap 'sleep 1; rm -rf "$work"; exit 255' TERM INT
mkdir "$work"
while :; do sleep 0.1; done
"""
LEAVES_IT = """#!/bin/sh
work="$APPTAINER_TMPDIR/build-temp-$$"
trap 'chmod 500 "$work/rootfs" "$work"; exit 255' TERM INT
mkdir -p "$work/rootfs/etc"
while :; do sleep 0.1; done
"""
SCRIPTS = {"script": CLEANS_UP, "leaves-it": LEAVES_IT}

COMMANDS = {
    "pull": ("pull", "docker://registry.example/x:1", "-o", "img.sif"),
    "build": ("build", "docker://registry.example/x:1", "-o", "img.sif"),
}


@pytest.mark.parametrize("apptainer", ["stand-in", "script", "leaves-it"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_stopped_pull_or_build_lets_apptainer_clean_up(
    tmp_path: Path, command: str, sig: signal.Signals, apptainer: str
) -> None:
    """The stand-in removes build-temp-* at once; the script takes a second, so ctrain must
    wait for it."""
    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    box = sandbox(
        tmp_path,
        CTRAIN_CACHE_DIR=str(tmp_path / "cache"),
        CTRAIN_MIN_FREE_GB="1",
        TMPDIR=str(node_tmp),
        FAKE_APPTAINER_LOG=str(tmp_path / "calls.jsonl"),
        FAKE_APPTAINER_DELAY="60",
    )
    if apptainer == "stand-in":
        fake_apptainer.install(box.bin)
    else:
        program = box.bin / "apptainer"
        program.write_text(SCRIPTS[apptainer])
        program.chmod(0o755)
    running = start_ctrain(*COMMANDS[command], env=box.env, cwd=tmp_path)
    try:
        wait_for(
            lambda: any(node_tmp.glob("ctrain-apptainer-*/build-temp-*")),
            "apptainer's build-temp-* in ctrain's directory",
            30,
        )
        running.send_signal(sig)
        _, err = running.communicate(timeout=60)
    finally:
        if running.poll() is None:
            running.kill()
            running.wait()
    assert running.returncode == 130, err
    assert f"ctrain: error: {command} stopped by {sig.name}" in err.strip().splitlines()[-1]
    assert list(node_tmp.iterdir()) == []
    beside = {p.name for p in tmp_path.iterdir() if "img.sif" in p.name}
    assert beside - {"img.sif.lock"} == set()  # no target, no temporary file


def test_a_child_that_ignores_the_signal_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    started = tmp_path / "started"
    script = f"trap '' TERM; touch {started}; while :; do sleep 0.1; done"
    timer = threading.Thread(
        target=lambda: (
            wait_for(started.exists, "the child to start", 30),
            os.kill(os.getpid(), signal.SIGTERM),
        )
    )
    timer.start()
    began = time.monotonic()
    code, stopped = proc.stream_forwarding(["/bin/sh", "-c", script], None, print, grace=0.5)
    timer.join(timeout=30)
    assert (code, stopped) == (-signal.SIGKILL, "SIGTERM")
    assert time.monotonic() - began < 20
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # ctrain's handler is gone again
