"""The peer-loss watch (ctrain/train/peerwatch.py) between two real local processes, no Slurm:
a rank killed with SIGKILL ends the other within seconds, with 124 and one line naming it; a
rank that ends in order (its script done, or ctrain's requeue exit) ends nobody.

Each process arms the watch as the start-up hook does, from the variables ``ctrain launch``
sets (rank 0 listens on a free port of 127.0.0.1), says ``ready`` once it is connected, then
does what its part says. The srun case, with Horovod, is tests/integration/test_rank_loss_real.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctrain.errors import REQUEUE_EXIT_CODE, STALLED_EXIT_CODE
from ctrain.names import ENV_LAUNCH_PEER_WATCH, Launched, Mode

ENDS_WITHIN = 20.0  # seconds; the watch ends a rank in well under one
pytestmark = pytest.mark.timeout(120)

RANK = """
import os, sys, threading, time
from ctrain.train import peerwatch, stopping

peerwatch.WATCH.arm_from(os.environ, stopping.end_process)
watch = peerwatch.WATCH.watch
deadline = time.monotonic() + 60
while len(watch.sockets) < 2 - watch.rank and time.monotonic() < deadline:  # rank 0: + listener
    time.sleep(0.01)
print("ready", flush=True)
part = sys.argv[1]
if part == "done":
    sys.exit(0)
if part == "requeue":
    stopping.end_process(75, "ctrain: checkpoint written; exiting with 75")
alive = lambda: any(t.name == "ctrain-peer-watch" for t in threading.enumerate())
while (part == "hold" or alive()) and time.monotonic() < deadline:  # until-quiet: watch done
    time.sleep(0.01)
sys.exit(3 if alive() else 0)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def ranks(parts: tuple[str, str], tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    """Rank 0 and rank 1 started with their parts, each ready; killed at the end if alive."""
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    address = f"127.0.0.1:{free_port()}"
    started = []
    for rank, part in enumerate(parts):
        env = {
            **os.environ,
            **Launched(
                mode=Mode.HOROVOD,
                rank=rank,
                size=2,
                local_rank=rank,
                local_size=2,
                collective="ring",
                collective_timeout=30,
            ).to_env(),
            ENV_LAUNCH_PEER_WATCH: address,
        }
        started.append(
            subprocess.Popen(
                [sys.executable, str(script), part],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        for proc in started:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


@pytest.mark.parametrize("victim", [0, 1])
def test_a_killed_rank_ends_the_other_at_once_with_124(victim: int, tmp_path: Path) -> None:
    with ranks(("hold", "hold"), tmp_path) as started:
        os.kill(started[victim].pid, signal.SIGKILL)
        other = started[1 - victim]
        code = other.wait(timeout=ENDS_WITHIN)
        assert other.stderr is not None
        said = other.stderr.read()
    host = "127.0.0.1" if victim == 0 else os.uname().nodename
    assert code == STALLED_EXIT_CODE, said
    assert said.splitlines() == [
        f"ctrain: error: rank {victim} on {host} is lost: its process ended without a goodbye "
        f"(killed, crashed, or its node gone), and MPI would wait for it for ever; ending rank "
        f"{1 - victim} with {STALLED_EXIT_CODE}"
    ]


@pytest.mark.parametrize("leaving", [0, 1])
@pytest.mark.parametrize(("part", "code"), [("done", 0), ("requeue", REQUEUE_EXIT_CODE)])
def test_a_rank_that_ends_in_order_ends_nobody(
    leaving: int, part: str, code: int, tmp_path: Path
) -> None:
    parts = (part, "until-quiet") if leaving == 0 else ("until-quiet", part)
    with ranks(parts, tmp_path) as started:
        codes = [proc.wait(timeout=ENDS_WITHIN) for proc in started]
        said = [proc.stderr.read() for proc in started if proc.stderr is not None]
    assert codes[leaving] == code, said
    assert codes[1 - leaving] == 0, said  # its watch ended on the goodbye, not on the loss
    assert "lost" not in said[1 - leaving]
