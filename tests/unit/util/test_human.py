"""fs.human: sizes for people, each unit's bounds and the rounding."""

from __future__ import annotations

import pytest

from ctrain.util import fs


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1, "1 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (-1023, "-1023 B"),
        (-1024, "-1.0 KiB"),
        (-2048, "-2.0 KiB"),
        (1024**2 - 1, "1024.0 KiB"),
        (1024**2, "1.0 MiB"),
        (5 * 1024**2 // 2, "2.5 MiB"),
        (1024**3, "1.0 GiB"),
        (1024**4 - 1024**3, "1023.0 GiB"),
        (1024**4, "1.0 TiB"),
        (-(1024**4), "-1.0 TiB"),
        (1024**5, "1024.0 TiB"),
        (1.5, "2 B"),
    ],
)
def test_human(size: float, text: str) -> None:
    assert fs.human(size) == text
