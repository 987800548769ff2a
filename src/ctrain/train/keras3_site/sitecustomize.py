"""Start-up hook of Keras 3 scripts in multiworker mode, for scripts that never call ctrain.

``ctrain launch`` puts this directory first on the script's PYTHONPATH when the mode is
multiworker and the script runs on Keras 3 (launch/plan.py). Python then imports this module at
start-up: it arms ctrain's fix of Keras 3's multi-worker trainer (ctrain/train/keras3_mwms.py,
applied when the script imports Keras) and runs the sitecustomize it shadows, if there is one.
Where ctrain itself is not importable (another Python than ctrain's), it does nothing else.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _arm() -> None:
    try:
        from ctrain.train import keras3_mwms
    except ImportError:
        return
    keras3_mwms.arm()


def _shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_arm()
_shadowed()
