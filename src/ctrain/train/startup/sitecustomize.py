"""Start-up hook of training scripts that never call ctrain, run by Python before the script.

``ctrain launch`` puts this directory first on the script's PYTHONPATH when the script needs
one of these (launch/plan.py), and Python imports this module at start-up:

- multiworker mode on Keras 3: arms ctrain's fix of Keras 3's multi-worker trainer
  (ctrain/train/keras3_mwms.py, applied when the script imports Keras);
- multiworker mode: SIGTERM's default back after TensorFlow's MultiWorkerMirroredStrategy
  installs its own handler, which only records the signal (ctrain/train/stopping.py);
- ``--profile``: arms the step hooks that trace the chosen steps (ctrain/train/steps.py);
- Horovod started by srun with PMIx: starts the peer-loss watch, which ends this rank when
  another rank's process is gone (ctrain/train/peerwatch.py).

Each waits for the module it changes, so nothing heavy is imported here. Then it runs the
sitecustomize it shadows, if there is one. Where ctrain itself is not importable (another
Python than ctrain's), it does nothing else.
"""

import importlib.machinery
import importlib.util
import os
import sys


def _arm() -> None:
    try:
        from ctrain.train import keras3_mwms, peerwatch, steps, stopping
    except ImportError:
        return
    if keras3_mwms.needed(os.environ):
        keras3_mwms.arm()
    if stopping.needed(os.environ):
        stopping.arm_default_sigterm()
    steps.arm_from(os.environ)
    peerwatch.WATCH.arm_from(os.environ, stopping.end_process)


def _shadowed() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_arm()
_shadowed()
