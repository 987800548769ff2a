"""Which Keras a training script runs on (tf-keras or Keras 3), and the start-up hook that
scripts which never call ctrain get (train/startup/sitecustomize.py). Pure."""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence

from ctrain.names import AUTO, KERAS_2, Mode
from ctrain.util.shipped import shipped_dir

LEGACY_KERAS = "TF_USE_LEGACY_KERAS"  # TensorFlow's switch: tf.keras is tf-keras, not Keras 3
STARTUP_HOOK = "train/startup"  # package data: sitecustomize of multiworker, --profile, peer watch


def script_of(command: Sequence[str]) -> str | None:
    """The training script of a command: its first argument ending in ``.py``."""
    return next((arg for arg in command if arg.endswith(".py")), None)


def imports_keras(source: str) -> bool:
    """Whether Python ``source`` imports ``keras`` itself (``import keras``, ``from keras...``),
    rather than through ``tf.keras``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(name == "keras" or name.startswith("keras.") for name in names):
            return True
    return False


def tf_keras_chosen(exported: str | None) -> bool:
    """TensorFlow's reading of TF_USE_LEGACY_KERAS: is ``tf.keras`` tf-keras?"""
    return exported in ("1", "true", "True")


def legacy_keras(choice: str, script_imports_keras: bool, exported: str | None) -> bool:
    """Whether the script runs on tf-keras (TF_USE_LEGACY_KERAS=1) rather than Keras 3.

    CTRAIN_KERAS=2 or 3 decides. With auto, an exported TF_USE_LEGACY_KERAS is kept (read as
    TensorFlow reads it); else Keras 3 exactly when the script imports keras itself, or (as
    ``launch.start`` passes it) the interpreter has no tf-keras.
    """
    if choice != AUTO:
        return choice == KERAS_2
    if exported is not None:
        return tf_keras_chosen(exported)
    return not script_imports_keras


def keras_environment(
    environ: Mapping[str, str], choice: str, script_imports_keras: bool, hook: bool, mode: Mode
) -> dict[str, str]:
    """TF_USE_LEGACY_KERAS, and the start-up hook first on PYTHONPATH where the script needs
    it: multiworker mode (SIGTERM; Keras 3), or ``hook`` (``--profile``, the peer-loss watch:
    train/startup/sitecustomize.py)."""
    exported = environ.get(LEGACY_KERAS)
    legacy = legacy_keras(choice, script_imports_keras, exported)
    env = {} if choice == AUTO and exported is not None else {LEGACY_KERAS: "1" if legacy else "0"}
    if mode is Mode.MULTIWORKER or hook:
        path = [str(shipped_dir(STARTUP_HOOK)), environ.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = ":".join(part for part in path if part)
    return env
