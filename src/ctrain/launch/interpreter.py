"""What the Python running ``ctrain launch`` holds: TensorFlow, Keras, tf-keras and Horovod,
found without being imported, and which copy of ctrain runs.

The launcher bases its choices on these (Keras 3 or tf-keras, whether Horovod mode can run, the
refusals of start.py), each rank in its own process: finding a module costs no process and under
a millisecond, so no probe container is started, per image or per rank (docs/architecture.md).
``ctrain launch --explain`` and ``ctrain exec --explain`` print them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import ctrain
from ctrain.names import ENV_CARRIED
from ctrain.util import proc

# The modules the launcher's choices depend on, as the script imports them.
MODULES = ("tensorflow", "keras", "tf_keras", "horovod")
UNKNOWN = "version unknown"  # found, but no distribution's metadata names it


def has(module: str) -> bool:
    """``module`` is importable by this interpreter (found, not imported)."""
    return importlib.util.find_spec(module) is not None


def runs_this_interpreter(
    command: Sequence[str], environ: Mapping[str, str], executable: str = sys.executable
) -> bool:
    """The command's program, found on ``environ``'s PATH as the command will be, is the
    interpreter that runs this launcher (``executable``): what the launcher finds in it is what
    the command gets."""
    if not command:
        return False
    program = proc.which(command[0], environ)
    return program is not None and os.path.abspath(program) == os.path.abspath(executable)


@dataclass(frozen=True)
class Holds:
    """This interpreter, the ctrain copy it runs, and each of MODULES' version (None: missing)."""

    python: str
    ctrain: str
    modules: tuple[tuple[str, str | None], ...]

    def lines(self) -> list[str]:
        held = ", ".join(f"{name} {version or 'missing'}" for name, version in self.modules)
        return [f"python {self.python}", f"ctrain {self.ctrain}", f"holds {held}"]

    def explain(self) -> dict[str, object]:
        return {"python": self.python, "ctrain": self.ctrain, "holds": dict(self.modules)}


def version(module: str, distributions: Mapping[str, list[str]]) -> str | None:
    """The version of the distribution that provides ``module``; None where it is missing."""
    import importlib.metadata  # here, as in this_interpreter: --explain's alone (~40 ms)

    if not has(module):
        return None
    for dist in distributions.get(module, ()):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return UNKNOWN


def this_interpreter(environ: Mapping[str, str]) -> Holds:
    """What this process's interpreter holds. ``ENV_CARRIED``, set by the carried boot script,
    says how the interpreter was chosen; without it ctrain is the one installed beside it."""
    import importlib.metadata  # here: a rank's start never needs it (~40 ms)

    here = f"{ctrain.__version__} from {Path(ctrain.__file__).parent}"
    carried = environ.get(ENV_CARRIED)
    if carried:
        python, copy = carried, f"{here} (carried from the host)"
    else:
        python = f"{sys.executable} (Python {sys.version_info[0]}.{sys.version_info[1]})"
        copy = f"{here} (installed beside this Python)"
    distributions = importlib.metadata.packages_distributions()
    return Holds(python, copy, tuple((m, version(m, distributions)) for m in MODULES))
