"""A rank killed (SIGKILL: the OOM killer, a crash) must end every rank of its step within 60 s,
and the step itself must end non-zero, under every launcher ctrain supports (issue 45).

Two ranks train the tiny model of scripts/multinode_probe.py (one thread each) until killed;
once each has ended its first epoch (its ``alive-<R>`` file, holding its pid, is there), rank
1's Python process gets SIGKILL. The launcher (srun, mpirun, horovodrun, mpiexec.hydra) must end
non-zero within 60 s of the kill, and no process of the step may be left running then (each
names the step's output directory on its command line: the launcher, the ranks, a wrapper
shell). The seconds each took are printed (``pytest -s``).

- ``srun`` with and without ``--kill-on-bad-exit``, multiworker and Horovod (``--mpi=pmix``),
  each rank on its own compute host (partition ``cluster``, docs/cluster.md). Without
  ``--kill-on-bad-exit`` srun waits for the other rank, which must notice the loss itself:
  multiworker's sees its peer's connection reset; Horovod's would wait in MPI for ever, and
  ctrain's peer-loss watch ends it (ctrain/train/peerwatch.py).
- Open MPI's ``mpirun``, ``horovodrun`` (on Gloo) and MPICH's ``mpiexec.hydra`` (ctrain runs
  Horovod on Gloo under it), Horovod mode, both ranks on this host, as users run them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN, wait_for
from tests.support.multinode import SRUN, STEP_TIMEOUT, cluster_env, probe
from tests.support.real_runs import BIN, clean_env

ENDS_WITHIN = 60.0  # seconds from the kill to the launcher's end
EPOCHS = 100_000  # trains until a rank is killed
KILLED_RANK = 1
pytestmark = [pytest.mark.tensorflow, pytest.mark.timeout(STEP_TIMEOUT + 2 * ENDS_WITHIN + 60)]


@dataclass(frozen=True)
class Launcher:
    """A launcher's argv up to ``ctrain launch``, the mode of the ranks, and where they run."""

    argv: tuple[str, ...]
    mode: str
    on_the_cluster: bool

    def env(self) -> dict[str, str]:
        quiet = {"TF_CPP_MIN_LOG_LEVEL": "2"}
        return cluster_env(**quiet) if self.on_the_cluster else clean_env(**quiet)


class StillRunning(AssertionError):
    """The step had not ended ENDS_WITHIN seconds after the kill."""


def srun(*options: str) -> tuple[str, ...]:
    """srun on two compute hosts, one rank each."""
    return (*SRUN, "-N", "2", "-n", "2", *options)


KILL_ON_BAD_EXIT = "--kill-on-bad-exit=1"
PMIX = "--mpi=pmix"
MPIRUN = ("mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "none")
HOROVODRUN = (str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo")
HYDRA = ("mpiexec.hydra", "-n", "2")
SLURM = [pytest.mark.slurm, pytest.mark.cluster]
HOROVOD = pytest.mark.horovod
LAUNCHERS = [
    pytest.param(Launcher(srun(), "multiworker", True), id="srun-multiworker", marks=SLURM),
    pytest.param(Launcher(srun(KILL_ON_BAD_EXIT), "multiworker", True),
                 id="srun-kill-on-bad-exit-multiworker", marks=SLURM),
    pytest.param(Launcher(srun(PMIX), "horovod", True), id="srun-horovod",
                 marks=[*SLURM, HOROVOD]),
    pytest.param(Launcher(srun(PMIX, KILL_ON_BAD_EXIT), "horovod", True),
                 id="srun-kill-on-bad-exit-horovod", marks=[*SLURM, HOROVOD]),
    pytest.param(Launcher(MPIRUN, "horovod", False), id="mpirun-horovod",
                 marks=[pytest.mark.mpi, HOROVOD]),
    pytest.param(Launcher(HOROVODRUN, "horovod", False), id="horovodrun-gloo", marks=HOROVOD),
    pytest.param(Launcher(HYDRA, "horovod", False), id="hydra-horovod",
                 marks=[pytest.mark.mpich, HOROVOD]),
]  # fmt: skip


def running(marker: str) -> list[int]:
    """The processes whose command line names ``marker`` and that still run (not zombies)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone meanwhile
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(proc.name))
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def rank_pid(out: Path, rank: int) -> int | None:
    """The pid rank RANK wrote once its first epoch ended, or None before."""
    try:
        text = (out / f"alive-{rank}").read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def log_tail(out: Path) -> str:
    return (out / "step.log").read_text(errors="replace")[-3000:]


@contextmanager
def step(launcher: Launcher, out: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Two ranks started under LAUNCHER, their output in OUT/step.log; whatever of the step
    still runs at the end is killed."""
    argv = [*launcher.argv, CTRAIN, "launch", "--mode", launcher.mode, "--", *probe(out, EPOCHS)]
    with (out / "step.log").open("wb") as log:
        started = subprocess.Popen(argv, env=launcher.env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        yield started
    finally:
        if started.poll() is None:
            started.kill()
            started.wait(timeout=30)
        kill_all(running(str(out)))


def kill_a_rank(started: subprocess.Popen[bytes], out: Path, name: str) -> int:
    """SIGKILL to rank KILLED_RANK; the launcher's exit code once it ended, within ENDS_WITHIN
    seconds (or StillRunning)."""
    victim = rank_pid(out, KILLED_RANK)
    assert victim is not None
    os.kill(victim, signal.SIGKILL)
    killed = time.monotonic()
    try:
        code = started.wait(timeout=ENDS_WITHIN)
    except subprocess.TimeoutExpired:
        said = f"still running {ENDS_WITHIN:.0f} s after the kill"
        print(f"\n{name}: {said}")
        raise StillRunning(f"{said}\n{log_tail(out)}") from None
    took = time.monotonic() - killed
    print(f"\n{name}: the step ended {took:.1f} s after the kill, exit {code}")
    return code


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_killed_rank_ends_the_step_non_zero_within_60_s(
    launcher: Launcher, cluster_tmp: Path, request: pytest.FixtureRequest
) -> None:
    with step(launcher, cluster_tmp) as started:
        wait_for(
            lambda: all(rank_pid(cluster_tmp, r) for r in (0, 1)),
            "both ranks to end their first epoch",
            timeout=STEP_TIMEOUT,
            interval=0.5,
        )
        code = kill_a_rank(started, cluster_tmp, request.node.callspec.id)
        left = running(str(cluster_tmp))
    assert code != 0, log_tail(cluster_tmp)
    assert not left, f"still running after the step ended: {left}\n{log_tail(cluster_tmp)}"
