"""exec_plan: a rank whose port is taken fails before the exec, naming the port; the stop
signals reach the training even where the rank inherited them ignored."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence

import pytest

from ctrain.errors import LaunchError
from ctrain.launch import start
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.plan import LaunchOptions, Plan, make_plan
from ctrain.util import proc
from tests.helpers import CTRAIN, ctrain_env
from tests.unit.launch.environs import slurm_step


class Exec(Exception):
    """Raised instead of replacing the test process."""


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The commands exec_plan would have exec'd (the exec itself is tested in test_proc)."""
    seen: list[list[str]] = []

    def fake_exec(argv: Sequence[str], env: Mapping[str, str]) -> None:
        seen.append(list(argv))
        raise Exec

    monkeypatch.setattr(proc, "exec_replace", fake_exec)
    return seen


@pytest.fixture
def listening() -> Iterator[int]:
    """A port some other process listens on (an ephemeral one, so nothing else wants it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("", 0))
        taken.listen()
        yield int(taken.getsockname()[1])


def _plan(port: int) -> Plan:
    """Rank 0 of a 2-task multiworker step whose port (job 0, step 0: block 0) is ``port``."""
    env = slurm_step(0, 2, job="0", SLURM_NTASKS=None, SLURM_JOB_NODELIST=None)
    plan = make_plan(JobEnv.from_environ(env, "vm"), LaunchOptions(port_base=port), env, ())
    assert plan.ports[0] == port
    return plan


def test_a_taken_port_refuses_before_the_exec(listening: int, execs: list[list[str]]) -> None:
    with pytest.raises(LaunchError, match=f"port {listening} for this rank is in use") as caught:
        start.exec_plan(_plan(listening), ["true"], {}, quiet=True)
    assert "CTRAIN_PORT_BASE" in caught.value.fix
    assert execs == []


def test_a_free_port_goes_on_to_the_exec(execs: list[list[str]]) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        free = int(probe.getsockname()[1])
    with pytest.raises(Exec):
        start.exec_plan(_plan(free), ["true"], {}, quiet=True)
    assert execs == [["true"]]


PROBE = (
    "import signal; print(' '.join(signal.getsignal(s).name for s in "
    "(signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP)))"
)


@pytest.mark.parametrize(
    ("ignored", "seen", "said"),
    [
        ((), "SIG_DFL SIG_DFL SIG_DFL", ""),
        ((signal.SIGTERM, signal.SIGHUP), "SIG_DFL SIG_DFL SIG_IGN", "SIGTERM came ignored"),
        ((signal.SIGUSR2, signal.SIGTERM), "SIG_DFL SIG_DFL SIG_DFL", "SIGUSR2 and SIGTERM came"),
    ],
)
def test_the_training_gets_the_stop_signals_default_back(
    ignored: tuple[int, ...], seen: str, said: str
) -> None:
    """A rank started with SIGTERM ignored (``trap '' TERM`` in a job script): the exec'd
    training gets the default back, for the stop signals only (SIGHUP stays as it came)."""

    def ignore() -> None:  # whatever this process came with (nohup ignores SIGHUP)
        for signum in (signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN if signum in ignored else signal.SIG_DFL)

    done = subprocess.run(
        [CTRAIN, "launch", "--", sys.executable, "-c", PROBE],
        env=ctrain_env({"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]}),
        preexec_fn=ignore,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == seen
    lines = [line for line in done.stderr.splitlines() if "came ignored" in line]
    assert [said in line for line in lines] == ([True] if said else [])
