"""``ctrain launch [--explain] -- COMMAND`` as the carried launcher's boot script starts it in
the image (container/boot.sh), without Click.

Every rank of a carried run starts here, on the image's Python, and every module it imports
from the standard library is read from the image (a SIF's squashfs, decompressed anew in each
container): Click and what it imports (uuid, inspect, datetime, gettext) would cost each rank's
start about 40 ms for a command line with one flag. The settings are ``ctrain launch``'s without
flags (CTRAIN_* variables, config files, defaults: what ``ctrain exec`` passed), the run is
``start.run``, the same as ``ctrain launch``'s, and a failure is its one ``ctrain: error: ...
Fix: ...`` line and exit code (``errors.exit_with``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NoReturn

from ctrain.errors import CtrainError, FileAccessError, Interrupted, UsageError, exit_with
from ctrain.launch import start
from ctrain.settings import resolve

USAGE = "[--explain] -- COMMAND..."


def parse(argv: Sequence[str]) -> tuple[bool, tuple[str, ...]]:
    """(--explain given, the command) from ``argv``."""
    explain = list(argv[:1]) == ["--explain"]
    rest = argv[1:] if explain else argv
    if list(rest[:1]) != ["--"]:
        raise UsageError(f"the carried ctrain launch takes {USAGE}", "run it through ctrain exec")
    return explain, tuple(rest[1:])


def main(argv: Sequence[str]) -> NoReturn:
    try:
        explain, command = parse(argv)
        settings = resolve({}, os.environ, os.getcwd())
        start.run(settings, command, os.environ, explain_only=explain)
    except CtrainError as exc:
        exit_with(exc)
    except OSError as exc:
        exit_with(FileAccessError.from_oserror(exc))
    except KeyboardInterrupt:
        exit_with(Interrupted.by_ctrl_c())
    raise SystemExit(0)
