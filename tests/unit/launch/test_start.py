"""exec_plan: a rank whose port is taken fails before the exec, naming the port."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping, Sequence

import pytest

from ctrain.errors import LaunchError
from ctrain.launch import start
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.plan import LaunchOptions, Plan, make_plan
from ctrain.util import proc
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
