"""``--profile`` in a job script (``ctrain job render --profile STEPS``): CTRAIN_PROFILE
exported after the script's mode, so every rank's ``ctrain launch`` reads it (CTRAIN_
variables pass into the container)."""

from __future__ import annotations

import re

from ctrain.errors import CtrainError

_MODE = re.compile(r"^export CTRAIN_MODE=\S+$", re.MULTILINE)


def render(text: str, steps: str) -> str:
    """A rendered job script that traces training steps ``steps`` (FIRST-LAST)."""
    if len(_MODE.findall(text)) != 1:
        raise CtrainError(
            "a job template is damaged: not exactly one export CTRAIN_MODE= line",
            "restore jobs/ from ctrain's source",
        )
    added = (
        "# Trace these training steps (ctrain job render --profile): rank 0 prints where the\n"
        "# time went; the traces are in ./ctrain-profile/jobJOBID.STEP (docs/profiling.md).\n"
        f"export CTRAIN_PROFILE={steps}"
    )
    return _MODE.sub(lambda mode_line: f"{mode_line.group(0)}\n{added}", text)
