"""The training API's decisions that need no TensorFlow: placement, batch sizes, lr scaling."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctrain.distributed import Context, Launched, prepare_environ
from ctrain.errors import LaunchError
from ctrain.launch import start
from ctrain.launch.plan import LaunchOptions
from ctrain.names import Mode


@dataclass
class TwoReplicas:
    """Stands in for a tf.distribute strategy: only its replica count is read."""

    num_replicas_in_sync: int = 2


def placed(mode: Mode, rank: int = 0, size: int = 1) -> Launched:
    return Launched(
        mode=mode,
        rank=rank,
        size=size,
        local_rank=rank,
        local_size=size,
        collective="ring",
        collective_timeout=600,
    )


def test_without_ctrain_launch_the_plan_is_made_in_process(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "https_proxy": "http://p:1"}
    found = prepare_environ(env)
    assert found == Launched(
        mode=Mode.SINGLE,
        rank=0,
        size=1,
        local_rank=0,
        local_size=1,
        collective="ring",
        collective_timeout=600,
    )
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert "https_proxy" not in env


@pytest.mark.parametrize(
    ("mode", "size", "strategy", "replicas", "batch", "lr"),
    [
        (Mode.SINGLE, 1, TwoReplicas(1), 1, 32, 0.1),
        (Mode.MIRRORED, 1, TwoReplicas(2), 2, 64, 0.2),  # one process splits a global batch
        (Mode.MULTIWORKER, 2, TwoReplicas(2), 2, 64, 0.2),
        (Mode.HOROVOD, 4, None, 4, 32, 0.4),  # each rank batches its own
    ],
)
def test_batch_and_learning_rate(
    mode: Mode, size: int, strategy: object, replicas: int, batch: int, lr: float
) -> None:
    ctx = Context(placed(mode, 0, size), strategy=strategy)
    assert ctx.replicas == replicas
    assert ctx.batch_size(32) == batch
    assert ctx.global_batch(32) == 32 * replicas
    assert ctx.scale_lr(0.1) == pytest.approx(lr)


def test_only_the_chief_gets_the_checkpoint_path(tmp_path: Path) -> None:
    chief = Context(placed(Mode.HOROVOD, 0, 2), strategy=None)
    other = Context(placed(Mode.HOROVOD, 1, 2), strategy=None)
    assert chief.checkpoint_dir(tmp_path / "ckpt") == tmp_path / "ckpt"
    scratch = other.checkpoint_dir(tmp_path / "ckpt")
    assert scratch.is_dir() and not scratch.is_relative_to(tmp_path)
    assert (chief.verbose, other.verbose) == (1, 0)


def test_horovod_mode_refused_when_horovod_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LaunchError, match="Horovod mode, but .* has no Horovod") as caught:
        start.prepare(LaunchOptions(mode="horovod"), {})
    assert "--mode multiworker" in caught.value.fix and "NGC" in caught.value.fix


def test_profile_from_the_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ctx.profile arms the step hooks once, with a run directory under the chosen folder;
    a second call before the window changes the window; a bad window is one ConfigError."""
    from ctrain.errors import ConfigError
    from ctrain.train import after_import, steps

    monkeypatch.setattr(steps, "HOOKS", steps.Hooks())
    monkeypatch.setattr("sys.meta_path", list(__import__("sys").meta_path))
    monkeypatch.setattr("atexit.register", lambda *args: None)
    monkeypatch.chdir(tmp_path)
    ctx = Context(placed(Mode.MULTIWORKER, rank=1, size=4), strategy=TwoReplicas())
    with pytest.raises(ConfigError, match=r"ctx.profile\('1', 'auto'\): the first step"):
        ctx.profile("1")
    assert steps.armed() is None
    ctx.profile("10-12", directory="traces")
    found = steps.armed()
    assert found is not None
    profiler = found.profiler
    assert (profiler.window.first, profiler.rank, profiler.size, profiler.trace) == (
        10,
        1,
        4,
        False,
    )
    assert profiler.run.parent == tmp_path / "traces"
    ctx.profile("20-21")
    assert steps.armed() is found and str(found.profiler.window) == "20-21"
    assert after_import.waiting_for(steps.FUNCTION) or "tensorflow" in __import__("sys").modules
