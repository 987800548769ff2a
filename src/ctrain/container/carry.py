"""ctrain's launcher carried into the container: any image with a Python >= 3.10 runs
``ctrain exec``, ctrain installed in it or not.

The host's own ctrain package and the one package its command line needs besides (click, pure
Python) are bound read-only into the container, at fixed paths of their own:

- ``/opt/ctrain-carried/api/ctrain``: on the PYTHONPATH of the launcher and of the training
  script, so that ``import ctrain`` (``ctrain.distributed``, the Keras and Horovod fixes,
  ``--profile``'s start-up hook) is the host's copy, the very version that planned the run;
- ``/opt/ctrain-carried/lib/click``: on the launcher's ``sys.path`` only. The script never sees
  it: its own ``import click`` is the image's, or fails as it would without ctrain.

The container runs ``/bin/sh BOOT --lib LIB [--python PATH] -- COMMAND...`` (``command``;
``boot.sh`` beside this module, carried with it, finds the package from its own path): the shell
chooses the image's interpreter (the rule of the ``image_python`` setting: ``--python`` is that
setting), refuses one line with the fix when there is none or it is too old, and execs
``ctrain launch`` with it. Nothing is written, in the image or in ``$HOME``; the image's own
``ctrain``, if any, is shadowed. docs/architecture.md says why the carried copy always runs.
Which runtimes carry it is each adapter's ``carries_launcher``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from ctrain.container.spec import Bind

ROOT = PurePosixPath("/opt/ctrain-carried")
API = ROOT / "api"  # ctrain alone: the launcher's and the script's PYTHONPATH
LIB = ROOT / "lib"  # the launcher's own dependencies: its sys.path only
BOOT = API / "ctrain" / "container" / "boot.sh"


class Carried(NamedTuple):
    """The host's directories of what is carried: ctrain's package, and each package of the
    launcher's own (name, directory)."""

    package: str
    deps: tuple[tuple[str, str], ...]


def of_modules(ctrain_file: str, deps: Sequence[tuple[str, str]]) -> Carried:
    """From the ``__file__`` of ctrain's ``__init__`` and of each dependency's."""
    return Carried(
        str(Path(ctrain_file).parent), tuple((name, str(Path(f).parent)) for name, f in deps)
    )


def binds(carried: Carried) -> tuple[Bind, ...]:
    """The read-only binds that put the launcher in the container."""
    return (
        Bind(carried.package, str(API / "ctrain"), "ro"),
        *(Bind(directory, str(LIB / name), "ro") for name, directory in carried.deps),
    )


def command(
    user_command: Sequence[str], image_python: str | None = None, explain: bool = False
) -> tuple[str, ...]:
    """What the container runs: the carried boot script, then ``ctrain launch -- COMMAND``
    (``ctrain launch --explain -- COMMAND`` with ``explain``) on ``image_python`` when named, else
    on the interpreter the boot script finds. An empty ``image_python`` names none (a job
    script's unset variable)."""
    return (
        "/bin/sh",
        str(BOOT),
        "--lib",
        str(LIB),
        *(("--python", image_python) if image_python is not None else ()),
        *(("--explain",) if explain else ()),
        "--",
        *user_command,
    )


def note(carried: Carried) -> str:
    """What --dry-run says of the launcher."""
    return (
        f"launcher: ctrain from {carried.package}, carried read-only to {API}/ctrain, run by "
        "the image's Python (--image-python); ctrain exec --explain shows which, and what it holds"
    )
