"""Stop on SIGUSR2, checkpoint, resume, with real TensorFlow and Horovod but without a job
script: the signal at the last step of an epoch, in the middle of one, on one rank only (all
ranks agree on the step), at the very last step (then it is simply done), and a checkpoint
from another configuration refused. And the SIGTERM handler TensorFlow's multiworker strategy
installs, taken back by ctrain's start-up hook. (SIGTERM from Slurm: test_sigterm_real.py.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ctrain.errors import CheckpointError
from ctrain.launch.keras import STARTUP_HOOK
from ctrain.names import Launched, Mode
from ctrain.train.checkpoints import REQUEUE_EXIT_CODE
from ctrain.util.shipped import shipped_dir
from tests.support.helpers import CTRAIN, SRC
from tests.support.real_runs import BIN, SCRIPTS, clean_env

RESUMABLE = SCRIPTS / "train_resumable.py"
pytestmark = [pytest.mark.tensorflow, pytest.mark.timeout(600)]


def train(out: Path, *args: str, restart: int = 0, launcher: tuple[str, ...] = ()) -> int:
    done = subprocess.run(
        [*launcher, str(BIN / "python"), str(RESUMABLE), str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="2", SLURM_RESTART_COUNT=str(restart)),
    )
    if done.returncode not in (0, REQUEUE_EXIT_CODE):
        raise AssertionError(f"exit {done.returncode}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.returncode


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def weights(out: Path, rank: int = 0) -> object:
    return json.loads((out / f"final-rank{rank}.json").read_text())["weights"]


def test_single_stopped_twice_ends_with_the_uninterrupted_weights(tmp_path: Path) -> None:
    reference, out = tmp_path / "reference", tmp_path / "out"
    assert train(reference, "4") == 0
    # the last step of epoch 1 (32 steps of 16), then step 10 of epoch 2
    assert train(out, "4", "--signal-at", "1:31") == REQUEUE_EXIT_CODE
    assert sorted(p.name for p in (out / "ckpt").iterdir())[-1] == "ckpt-e000002-s000000000"
    assert train(out, "4", "--signal-at", "2:10", restart=1) == REQUEUE_EXIT_CODE
    assert sorted(p.name for p in (out / "ckpt").iterdir())[-1] == "ckpt-e000002-s000000011"
    assert train(out, "4", restart=2) == 0
    runs = lines(out / "runs.jsonl")
    assert [r["start"] for r in runs] == [[0, 0], [2, 0], [2, 11]]
    assert [e["epoch"] for e in lines(out / "epochs.jsonl")] == [0, 1, 2, 3]
    assert weights(out) == weights(reference)


def test_a_checkpoint_of_another_configuration_is_refused(tmp_path: Path) -> None:
    # a signal at the very last step: checkpointed, and done (nothing left to requeue)
    assert train(tmp_path, "1", "--signal-at", "0:31") == 0
    assert (tmp_path / "final-rank0.json").is_file()
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["ckpt-e000001-s000000000"]
    done = subprocess.run(
        [str(BIN / "python"), str(RESUMABLE), str(tmp_path), "2", "--config-tag", "b"],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert done.returncode == CheckpointError.exit_code == 6, done.stderr  # ctrain.train's hook
    assert "Traceback" not in done.stderr
    assert "written by a different training configuration; refusing" in done.stderr
    assert len(lines(tmp_path / "runs.jsonl")) == 1  # it never trained


@pytest.mark.slurm
@pytest.mark.horovod
def test_horovod_ranks_agree_to_stop_when_one_is_signalled(tmp_path: Path) -> None:
    srun = ("srun", "--mpi=pmix", "-n", "2", "-t", "5", "--kill-on-bad-exit=1")
    launcher = (*srun, CTRAIN, "launch", "--mode", "horovod", "--")
    code = train(tmp_path, "3", "--signal-at", "1:5", "--signal-rank", "1", launcher=launcher)
    assert code == REQUEUE_EXIT_CODE
    first = lines(tmp_path / "runs.jsonl")
    assert sorted(r["rank"] for r in first) == [0, 1]  # type: ignore[type-var]
    assert {r["end"] for r in first} == {f"exit {REQUEUE_EXIT_CODE}"}
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir())[-1] == "ckpt-e000001-s000000006"
    assert train(tmp_path, "3", restart=1, launcher=launcher) == 0
    resumed = [r for r in lines(tmp_path / "runs.jsonl") if r["restart"] == 1]
    assert [r["start"] for r in resumed] == [[1, 6], [1, 6]]
    assert weights(tmp_path, 0) == weights(tmp_path, 1)


SIGTERM_PROBE = """
import json, os, signal, socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
cluster = {"worker": [f"127.0.0.1:{port}"]}
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
import tensorflow as tf

def caught():
    status = open(f"/proc/{os.getpid()}/status").read()
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)

before = caught()
tf.distribute.MultiWorkerMirroredStrategy()
print(json.dumps([before, caught()]))
"""


@pytest.mark.parametrize(("hooked", "caught"), [(False, [False, True]), (True, [False, False])])
def test_the_multiworker_strategy_takes_sigterm_and_the_start_up_hook_gives_it_back(
    tmp_path: Path, hooked: bool, caught: list[bool]
) -> None:
    """Without the hook, TensorFlow's handler (it only records the signal) holds SIGTERM after
    the strategy is made; with it, as ``ctrain launch`` gives every multiworker script, the
    default is back: a script that never calls ctrain ends on SIGTERM."""
    launched = Launched(
        mode=Mode.MULTIWORKER,
        rank=0,
        size=1,
        local_rank=0,
        local_size=1,
        collective="auto",
        collective_timeout=600,
    ).to_env()
    path = [str(shipped_dir(STARTUP_HOOK))] if hooked else []
    env = clean_env(TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=":".join([*path, SRC]), **launched)
    done = subprocess.run(
        [str(BIN / "python"), "-c", SIGTERM_PROBE],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == caught
