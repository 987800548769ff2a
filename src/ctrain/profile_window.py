"""``--profile``'s step window and ranks as the settings take them: parsed and checked here, on
the ground floor, for the settings table (settings.py), ``ctrain launch`` (launch/profile.py),
the training script's hooks (train/) and ``ctrain bench``. Pure; imports nothing of ctrain's.

Steps count from 1, as Keras numbers batches over the whole run (not per epoch). A window is
``FIRST-LAST`` or one step ``N``; the first step traces and compiles the graph, so it is never
traced.
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_STEPS = 100  # a longer trace is gigabytes that TensorBoard's profile plugin cannot open
DEFAULT_PROFILE_DIR = "ctrain-profile"
AUTO_RANKS = "auto"
ALL_RANKS = "all"
EXAMPLE = "20-25"


class StepWindow(NamedTuple):
    """Training steps FIRST..LAST, both traced."""

    first: int
    last: int

    @property
    def steps(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


def parse_window(text: str) -> StepWindow:
    """``N`` or ``FIRST-LAST`` as a StepWindow; a ValueError says what is wrong and what to give."""
    bounds = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", text)
    if bounds is None:
        raise ValueError(
            f"not a step or a range of steps; give steps after warm-up, e.g. {EXAMPLE}"
        )
    first = int(bounds.group(1))
    last = int(bounds.group(2)) if bounds.group(2) is not None else first
    if first == 0:
        raise ValueError(f"steps count from 1; e.g. {EXAMPLE}")
    if first == 1:
        raise ValueError(
            f"the first step traces and compiles the model and is never traced; "
            f"start after warm-up, e.g. {EXAMPLE}"
        )
    if last < first:
        raise ValueError(f"the range ends before it starts; write it {last}-{first}")
    if last - first + 1 > MAX_STEPS:
        raise ValueError(
            f"{last - first + 1} steps, more than {MAX_STEPS} to trace; a few steps show where "
            f"the time goes, e.g. {first}-{first + 5}"
        )
    return StepWindow(first, last)


def window_of(checked: str | None) -> StepWindow | None:
    """The window of a profile setting's value, which its row wrote FIRST-LAST from
    ``parse_window`` (settings_table.py): the one parse is the setting's; None for none."""
    if checked is None:
        return None
    first, last = checked.split("-")
    return StepWindow(int(first), int(last))


def check_ranks(text: str) -> str:
    """``auto``, ``all`` or a comma-separated list of ranks, as given (ValueError otherwise)."""
    if text in (AUTO_RANKS, ALL_RANKS) or re.fullmatch(r"\d+(,\d+)*", text):
        return text
    raise ValueError("not auto, all or a list of ranks such as 0,7")
