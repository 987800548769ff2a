"""exec_plan: a rank whose port is taken fails before the exec, naming the port; the stop
signals reach the training even where the rank inherited them ignored."""

from __future__ import annotations

import importlib.util
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
from tests.support.environs import slurm_step
from tests.support.helpers import CTRAIN, ctrain_env


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


# ---- what the launcher checks of its interpreter before the command starts -------------------


def missing(*names: str) -> object:
    real = importlib.util.find_spec

    def find_spec(name: str) -> object:
        return None if name in names else real(name)

    return find_spec


CARRIED = "/usr/bin/python3 (Python 3.11, the command's interpreter)"


def test_a_carried_launch_of_a_command_on_this_interpreter_without_tensorflow_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Here this venv's Python stands for the image's: the command runs on it exactly when its
    program, found on the command's PATH, is this interpreter."""
    monkeypatch.setattr(importlib.util, "find_spec", missing("tensorflow"))
    here = {"CTRAIN_CARRIED": CARRIED, "PATH": os.path.dirname(sys.executable)}
    with pytest.raises(LaunchError) as caught:
        start.prepare(LaunchOptions(), here, [os.path.basename(sys.executable), "train.py"])
    assert str(caught.value) == f"{CARRIED} has no TensorFlow"
    assert "--image-python" in caught.value.fix
    with pytest.raises(LaunchError):
        start.prepare(LaunchOptions(), here, [sys.executable, "train.py"])
    # a shell may set up an environment first; another Python is not this one; ctrain's own
    # image or the host is not judged
    start.prepare(LaunchOptions(), here, ["bash", "-c", "source /ext3/env.sh; python t.py"])
    start.prepare(LaunchOptions(), {**here, "PATH": "/nowhere"}, ["python3", "train.py"])
    start.prepare(LaunchOptions(), {}, [sys.executable, "train.py"])


def test_keras_follows_what_the_interpreter_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without tf-keras, auto is Keras 3 (TensorFlow's own; TF_USE_LEGACY_KERAS=1 would fail
    its import) and an explicit Keras 2 is refused; with it, auto stays tf-keras."""
    assert (
        start.prepare(LaunchOptions(), {}, ["python", "t.py"]).env_set["TF_USE_LEGACY_KERAS"] == "1"
    )
    monkeypatch.setattr(importlib.util, "find_spec", missing("tf_keras"))
    assert (
        start.prepare(LaunchOptions(), {}, ["python", "t.py"]).env_set["TF_USE_LEGACY_KERAS"] == "0"
    )
    with pytest.raises(LaunchError, match=r"--keras 2 \(tf-keras\), but .* has no tf-keras"):
        start.prepare(LaunchOptions(keras="2"), {}, ["python", "t.py"])
