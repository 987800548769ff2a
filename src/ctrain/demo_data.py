"""An embedded default dataset: MNIST-shaped synthetic digits, made offline from a seed.

Ten class templates (smooth random strokes on a 28x28 canvas), each example a template shifted
by a pixel or two with noise added. Small, deterministic, learnable: enough for a demo and
tests on machines with no network, where real datasets cannot be downloaded.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

SIDE = 28
CLASSES = 10


def _templates(rng: np.random.Generator) -> npt.NDArray[np.float32]:
    canvas = np.zeros((CLASSES, SIDE, SIDE), dtype=np.float32)
    for label in range(CLASSES):
        y, x = rng.integers(6, SIDE - 6, size=2)
        for _ in range(40):  # a random walk of a 3x3 pen
            y = int(np.clip(y + rng.integers(-2, 3), 3, SIDE - 4))
            x = int(np.clip(x + rng.integers(-2, 3), 3, SIDE - 4))
            canvas[label, y - 1 : y + 2, x - 1 : x + 2] = 1.0
    return canvas


def synthetic_digits(
    count: int, seed: int = 0
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """``count`` images (uint8, shape [count, 28, 28, 1]) and labels 0-9."""
    rng = np.random.default_rng(seed)
    templates = _templates(np.random.default_rng(12345))  # the same classes for every seed
    labels = rng.integers(0, CLASSES, size=count)
    shifts = rng.integers(-2, 3, size=(count, 2))
    images = np.empty((count, SIDE, SIDE), dtype=np.float32)
    for i, (label, (dy, dx)) in enumerate(zip(labels, shifts, strict=True)):
        images[i] = np.roll(templates[label], (int(dy), int(dx)), axis=(0, 1))
    images += rng.normal(0.0, 0.35, size=images.shape).astype(np.float32)
    pixels = np.clip(images * 255.0, 0, 255).astype(np.uint8)
    return pixels[..., None], labels.astype(np.int64)
