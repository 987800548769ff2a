"""Which Keras a script runs on (CTRAIN_KERAS, TF_USE_LEGACY_KERAS) and the Keras 3 hook."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from ctrain.launch import start
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.keras import LEGACY_KERAS, STARTUP_HOOK, imports_keras, legacy_keras, script_of
from ctrain.launch.plan import LaunchOptions, make_plan
from ctrain.names import AUTO, KERAS_2, KERAS_CHOICES
from ctrain.util.shipped import shipped_dir

EXPORTED = (None, "1", "true", "True", "0", "false", "")


def expected_legacy(choice: str, imports: bool, exported: str | None) -> bool:
    """The documented rule, spelled out case by case."""
    if choice == "2":
        return True
    if choice == "3":
        return False
    if exported in ("1", "true", "True"):
        return True
    if exported is not None:
        return False
    return not imports


@pytest.mark.parametrize(
    ("choice", "imports", "exported"),
    list(itertools.product(KERAS_CHOICES, (False, True), EXPORTED)),
)
def test_legacy_keras_truth_table(choice: str, imports: bool, exported: str | None) -> None:
    assert legacy_keras(choice, imports, exported) is expected_legacy(choice, imports, exported)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("import keras\n", True),
        ("import keras.layers as L\n", True),
        ("from keras import layers\n", True),
        ("from keras.optimizers import SGD\n", True),
        ("def f():\n    import keras\n", True),
        ("import numpy, keras\n", True),
        ("import tensorflow as tf\nmodel = tf.keras.Sequential()\n", False),
        ("from tensorflow import keras\n", False),
        ("import tf_keras as keras\n", False),
        ("import kerastuner\n", False),
        ("from .keras import thing\n", False),
        ("# import keras\ntext = 'import keras'\n", False),
        ("import keras(\n", False),  # not Python: tf-keras, as before
    ],
)
def test_imports_keras(source: str, found: bool) -> None:
    assert imports_keras(source) is found


@pytest.mark.parametrize(
    ("command", "script"),
    [
        (["python", "train.py", "--epochs", "2"], "train.py"),
        (["python", "-u", "/a b/train.py"], "/a b/train.py"),
        (["./train.py"], "./train.py"),
        (["python", "-m", "ctrain.bench.synthetic"], None),
        (["python", "-c", "import keras"], None),
        ([], None),
    ],
)
def test_script_of(command: list[str], script: str | None) -> None:
    assert script_of(command) == script


def test_the_script_is_read_and_a_missing_one_is_tf_keras(tmp_path: Path) -> None:
    keras3 = tmp_path / "k3.py"
    keras3.write_text("import keras\n")
    assert start.script_imports_keras(["python", str(keras3)]) is True
    assert start.script_imports_keras(["python", str(tmp_path / "gone.py")]) is False


def plan_env(mode: str, choice: str, imports: bool, environ: dict[str, str]) -> dict[str, str]:
    job = JobEnv.from_environ(
        {**environ, "SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}, "vm"
    )
    options = LaunchOptions(mode=mode, keras=choice)
    return make_plan(job, options, environ, (), imports).env_set


def test_a_keras3_script_gets_keras3_and_in_multiworker_the_hook() -> None:
    hook = str(shipped_dir(STARTUP_HOOK))
    env = plan_env("multiworker", AUTO, True, {"PYTHONPATH": "/mine"})
    assert env[LEGACY_KERAS] == "0"
    assert env["PYTHONPATH"] == f"{hook}:/mine"
    assert (Path(hook) / "sitecustomize.py").is_file()
    assert plan_env("multiworker", AUTO, True, {})["PYTHONPATH"] == hook
    horovod = plan_env("horovod", AUTO, True, {})
    assert horovod[LEGACY_KERAS] == "0"
    assert "PYTHONPATH" not in horovod


def test_a_tf_keras_script_gets_tf_keras_and_in_multiworker_the_hook() -> None:
    env = plan_env("multiworker", AUTO, False, {})
    assert env[LEGACY_KERAS] == "1"
    assert env["PYTHONPATH"] == str(shipped_dir(STARTUP_HOOK))  # SIGTERM's default back
    for mode in ("horovod", "mirrored"):
        assert "PYTHONPATH" not in plan_env(mode, AUTO, False, {})


def test_an_exported_choice_is_kept_under_auto_and_overridden_by_ctrain_keras() -> None:
    assert LEGACY_KERAS not in plan_env("multiworker", AUTO, True, {LEGACY_KERAS: "1"})
    forced = plan_env("multiworker", KERAS_2, True, {LEGACY_KERAS: "0"})
    assert forced[LEGACY_KERAS] == "1"
