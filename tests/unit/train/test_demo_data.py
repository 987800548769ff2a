"""The embedded datasets (no network) and proc.stream, which ctrain bench reads runs with."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from ctrain.errors import ExternalToolError
from ctrain.train.demo_data import SHAPE_CLASSES, synthetic_digits, synthetic_shapes
from ctrain.util import proc


def test_digits_are_deterministic_and_mnist_shaped() -> None:
    x, y = synthetic_digits(50, seed=3)
    assert x.shape == (50, 28, 28, 1) and x.dtype == np.uint8
    assert y.shape == (50,) and set(y) <= set(range(10))
    x2, y2 = synthetic_digits(50, seed=3)
    assert np.array_equal(x, x2) and np.array_equal(y, y2)


def test_shapes_are_deterministic_rgb_images_of_five_classes() -> None:
    x, y = synthetic_shapes(200, size=32, seed=1)
    assert x.shape == (200, 32, 32, 3) and x.dtype == np.uint8
    assert set(y) == set(range(len(SHAPE_CLASSES)))
    again, _ = synthetic_shapes(200, size=32, seed=1)
    assert np.array_equal(x, again)
    other, _ = synthetic_shapes(200, size=32, seed=2)
    assert not np.array_equal(x, other)


def test_shapes_are_learnable_the_classes_differ() -> None:
    x, y = synthetic_shapes(500, size=32, seed=0)
    bright = (x.astype(np.float32).mean(axis=3) > 110).mean(axis=(1, 2))  # shape area
    means = [bright[y == c].mean() for c in range(len(SHAPE_CLASSES))]
    assert max(means) - min(means) > 0.02


def test_stream_hands_over_every_line_of_both_outputs() -> None:
    lines: list[str] = []
    code = proc.stream(
        [sys.executable, "-c", "import sys; print('a'); print('b', file=sys.stderr); exit(3)"],
        None,
        lines.append,
        timeout=60,
    )
    assert code == 3
    assert sorted(lines) == ["a\n", "b\n"]


def test_stream_stops_a_run_past_its_timeout() -> None:
    with pytest.raises(ExternalToolError, match="did not finish within 1"):
        proc.stream([sys.executable, "-c", "import time; time.sleep(60)"], None, print, 1)


def test_stream_missing_program() -> None:
    with pytest.raises(ExternalToolError, match="not found"):
        proc.stream(["/nonexistent/program"], None, print)
