"""Scripts written the way users write them, with nothing from ctrain (tests/scripts/), run
unchanged through `ctrain launch` in each mode they support, two ranks each.

Every script prints one `RESULT {json}` line per rank with a digest of its final weights: the
ranks must end with the same weights. Horovod's Keras API needs ctrain's patched Horovod
(patches/horovod-0.28.1, docs/horovod-patches.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import CTRAIN, printed_json
from tests.support.real_runs import BIN, clean_env, run

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PYTHON = str(BIN / "python")
SRUN = ["srun", "-t", "5", "--kill-on-bad-exit=1", "-n", "2"]
TIMEOUT = 240

# Horovod's launchers, each as a prefix of `ctrain launch -- ...`.
HOROVOD_LAUNCHERS = [
    pytest.param([*SRUN, "--mpi=pmix"], id="srun-pmix", marks=pytest.mark.slurm),
    pytest.param(
        ["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "none"],
        id="mpirun",
        marks=pytest.mark.mpi,
    ),
    pytest.param(
        [str(BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo"], id="horovodrun-gloo"
    ),
    # MPICH's launcher: Horovod's Open MPI cannot start under it, ctrain runs it on Gloo.
    pytest.param(["mpiexec.hydra", "-n", "2"], id="mpich-hydra", marks=pytest.mark.mpich),
]


def launch(launcher: list[str], script: str, *args: str) -> list[dict[str, Any]]:
    """Run SCRIPT under LAUNCHER through `ctrain launch`; each rank's RESULT, by rank."""
    argv = [*launcher, CTRAIN, "launch", "--", PYTHON, str(SCRIPTS / script), *args]
    done = run(argv, clean_env(), timeout=TIMEOUT)
    found: list[dict[str, Any]] = printed_json(done.stdout, "RESULT")
    assert found, f"no RESULT line in\n{done.stdout}\n{done.stderr}"
    return sorted(found, key=lambda r: int(r.get("rank", 0)))


@pytest.mark.horovod
@pytest.mark.parametrize("launcher", HOROVOD_LAUNCHERS)
def test_horovod_keras_callbacks(launcher: list[str], tmp_path: Path) -> None:
    chief, worker = launch(launcher, "hvd_keras.py", str(tmp_path))
    assert [chief["rank"], worker["rank"]] == [0, 1] and chief["size"] == worker["size"] == 2
    assert chief["digest"] == worker["digest"]
    assert chief["loss"] == worker["loss"]  # MetricAverageCallback: the ranks' mean
    loss, lr = chief["loss"], chief["lr"]
    assert loss[-1] < loss[0]
    assert lr[0] < lr[1] == pytest.approx(0.02) == lr[2]  # warm-up from 0.01 to 0.01 x 2 ranks
    assert chief["restored_same"] and chief["restored_distributed"]  # hvd.load_model
    assert worker["restored_same"] and worker["restored_distributed"]
    assert (tmp_path / "model.keras").is_file()


@pytest.mark.horovod
@pytest.mark.parametrize("launcher", HOROVOD_LAUNCHERS)
def test_horovod_gradient_tape(launcher: list[str]) -> None:
    chief, worker = launch(launcher, "hvd_tape.py")
    assert [chief["rank"], worker["rank"]] == [0, 1] and chief["size"] == 2
    assert chief["digest"] == worker["digest"]
    loss = chief["loss"]
    assert loss == worker["loss"]  # allreduced by the script
    assert loss[-1] < loss[0]


@pytest.mark.slurm
@pytest.mark.tensorflow
def test_tensorflow_multiworker_tutorial(tmp_path: Path) -> None:
    chief, worker = launch(SRUN, "tf_multiworker.py", str(tmp_path))
    assert [chief["rank"], worker["rank"]] == [0, 1]
    assert chief["replicas"] == worker["replicas"] == 2
    assert chief["digest"] == worker["digest"]
    assert chief["saved"] == str(tmp_path / "model.keras")
    assert (tmp_path / "model.keras").is_file()
    assert not str(worker["saved"]).startswith(str(tmp_path))


@pytest.mark.tensorflow
def test_mirrored_strategy_with_checkpoints_and_tensorboard(tmp_path: Path) -> None:
    (result,) = launch([], "mirrored_checkpoint.py", str(tmp_path))
    assert result["checkpoints"] == [f"epoch-{n}.weights.h5" for n in (1, 2, 3)]
    assert result["restored_digest"] == result["digest"]
    assert result["event_files"] >= 1
