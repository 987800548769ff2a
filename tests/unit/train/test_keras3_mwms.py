"""ctrain's fix of Keras 3's multi-worker trainer: when it applies, what it refuses. The
replacements themselves run for real in tests/integration/test_keras3_scripts.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ctrain.errors import LaunchError
from ctrain.train import after_import, keras3_mwms

# The two functions as Keras 3.5 to 3.15 have them (abridged), in a module of their own so
# that inspect.getsource reads them as it reads the installed trainer.
BUGGY = """
class TensorFlowTrainer:
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None:
            for _, _, it in iterator:
                maybe_distributed_data_batch = next(it)
                data_batch = self.distribute_strategy.reduce(
                    "MEAN",
                    maybe_distributed_data_batch,
                    axis=None,
                )
                break


def reduce_per_replica(values, strategy, reduction):
    def _reduce(v):
        if reduction == "mean":
            return strategy.reduce("MEAN", v, axis=0)
"""


def trainer_module(tmp_path: Path, source: str, name: str) -> ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_both_faults_are_replaced_once(tmp_path: Path) -> None:
    trainer = trainer_module(tmp_path, BUGGY, "buggy_trainer")
    build, reduce = trainer.TensorFlowTrainer._maybe_symbolic_build, trainer.reduce_per_replica
    assert keras3_mwms.apply(trainer, "3.15.1") == (True, True)
    assert trainer.TensorFlowTrainer._maybe_symbolic_build is not build
    assert trainer.reduce_per_replica is not reduce
    assert keras3_mwms.apply(trainer, "3.15.1") == (False, False)  # already replaced


def test_a_fixed_keras_turns_the_fix_off(tmp_path: Path) -> None:
    fixed = BUGGY.replace("axis=0", "axis=None").replace(
        "self.distribute_strategy.reduce(", "first_replica("
    )
    trainer = trainer_module(tmp_path, fixed, "fixed_trainer")
    reduce = trainer.reduce_per_replica
    assert keras3_mwms.apply(trainer, "3.16.0") == (False, False)
    assert trainer.reduce_per_replica is reduce


def test_only_the_fault_still_there_is_replaced(tmp_path: Path) -> None:
    half = BUGGY.replace("axis=0", "axis=None")
    assert keras3_mwms.apply(trainer_module(tmp_path, half, "half"), "3.16.0") == (True, False)


def test_keras_below_3_5_is_refused(tmp_path: Path) -> None:
    trainer = trainer_module(tmp_path, BUGGY, "old_trainer")
    with pytest.raises(LaunchError, match=r"Keras 3\.4\.1 does not all-reduce") as error:
        keras3_mwms.apply(trainer, "3.4.1")
    assert "keras>=3.5" in error.value.fix


def test_a_build_of_unknown_shape_is_refused_not_guessed(tmp_path: Path) -> None:
    other = BUGGY.replace("for _, _, it in iterator:", "for it in iterator.enumerate_epoch():")
    with pytest.raises(LaunchError, match="does not know"):
        keras3_mwms.apply(trainer_module(tmp_path, other, "other_trainer"), "3.6.0")


def test_the_installed_keras_still_has_both_faults() -> None:
    """Pins the gate to the Keras this project installs: when this fails, Keras fixed them
    (check keras-team/keras#20585) and ctrain's fix is off by itself."""
    found = importlib.util.find_spec("keras")
    if found is None or found.origin is None:
        pytest.fail("keras is not installed in this environment")
    source = (Path(found.origin).parent / "src/backend/tensorflow/trainer.py").read_text()
    assert keras3_mwms.faults(source, source) == (True, True)
    assert keras3_mwms.BUILD_LOOP in keras3_mwms._squashed(source)


@pytest.mark.parametrize(
    ("version", "parsed"),
    [("3.15.1", (3, 15)), ("3.5.0", (3, 5)), ("3.9.0.dev2025", (3, 9)), ("nightly", (0, 0))],
)
def test_keras_version(version: str, parsed: tuple[int, int]) -> None:
    assert keras3_mwms.keras_version(version) == parsed


@pytest.mark.parametrize(
    ("steps", "jit", "gpus", "refused"),
    [
        (1, False, 0, None),
        (1, True, 1, None),  # XLA has collectives on GPUs
        (4, False, 1, "steps_per_execution=4"),
        (1, True, 0, "jit_compile=True"),
    ],
)
def test_refusal(steps: int, jit: bool, gpus: int, refused: str | None) -> None:
    error = keras3_mwms.refusal(steps, jit, gpus)
    if refused is None:
        assert error is None
    else:
        assert error is not None and refused in error.message and error.fix


def test_arm_applies_the_fix_when_the_trainer_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "late_trainer.py").write_text(BUGGY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(keras3_mwms, "TRAINER", "late_trainer")
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    keras3_mwms.arm()
    keras3_mwms.arm()  # armed once
    assert sum(isinstance(f, after_import._AfterImport) for f in sys.meta_path) == 1
    import late_trainer  # type: ignore[import-not-found]

    assert late_trainer.reduce_per_replica.__module__ == "ctrain.train.keras3_mwms"
    assert not any(isinstance(f, after_import._AfterImport) for f in sys.meta_path)


def test_arm_refuses_an_old_keras_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer = trainer_module(tmp_path, BUGGY, "loaded_trainer")
    monkeypatch.setattr(keras3_mwms, "TRAINER", "loaded_trainer")
    monkeypatch.setattr("importlib.metadata.version", lambda name: "3.4.0")
    with pytest.raises(SystemExit) as stopped:
        keras3_mwms.arm()
    assert stopped.value.code == LaunchError.exit_code
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ctrain: error: Keras 3.4.0 does not all-reduce") and "Fix: " in line
    assert trainer.reduce_per_replica.__module__ == "loaded_trainer"  # left as it was
