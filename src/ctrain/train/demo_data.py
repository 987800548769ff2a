"""An embedded default dataset: MNIST-shaped synthetic digits, made offline from a seed.

Ten class templates (smooth random strokes on a 28x28 canvas), each example a template shifted
by a pixel or two with noise added. Small, deterministic, learnable: enough for a demo and
tests on machines with no network, where real datasets cannot be downloaded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


SHAPE_CLASSES = ("square", "disc", "cross", "stripes", "ring")


def synthetic_shapes(
    count: int, size: int = 64, seed: int = 0
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """``count`` RGB images (uint8, [count, size, size, 3]) of five shape classes, each drawn
    at a random place, scale and colour on a noisy background, and their labels."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, len(SHAPE_CLASSES), size=count)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    images = rng.normal(0.3, 0.1, size=(count, size, size, 3)).astype(np.float32)
    for i, label in enumerate(labels):
        cy, cx = rng.uniform(0.3, 0.7, size=2)
        r = rng.uniform(0.12, 0.25)
        dy, dx = np.abs(yy - cy), np.abs(xx - cx)
        if label == 0:
            mask = (dy < r) & (dx < r)
        elif label == 1:
            mask = dy**2 + dx**2 < r**2
        elif label == 2:
            mask = ((dy < r / 3) & (dx < r)) | ((dx < r / 3) & (dy < r))
        elif label == 3:
            mask = (np.floor(yy * size / 4) % 2 == 0) & (dy < r) & (dx < r)
        else:
            mask = np.abs(np.sqrt(dy**2 + dx**2) - r * 0.8) < r / 4
        images[i][mask] = rng.uniform(0.5, 1.0, size=3).astype(np.float32)
    pixels = np.clip(images * 255.0, 0, 255).astype(np.uint8)
    return pixels, labels.astype(np.int64)


TFDS_NAME = "ctrain_shapes"


def write_tfds_shapes(
    data_dir: str, train: int = 512, test: int = 128, size: int = 64, name: str = TFDS_NAME
) -> str:
    """Prepare ``synthetic_shapes`` as a TFDS dataset (TFRecords + metadata, version 1.0.0)
    under ``data_dir``, as ``tfds build`` leaves a downloaded one; return its directory.

    Read it as any prepared dataset: ``tfds.builder_from_directory(<returned path>)``, or
    ``examples/resnet50_transfer.py --data-dir DATA_DIR --dataset ctrain_shapes``. No network.
    """
    import tensorflow_datasets as tfds

    tfds.disable_progress_bar()
    dataset_name = name
    with tfds.core.registered.skip_registration():

        class Builder(tfds.core.GeneratorBasedBuilder):  # type: ignore[misc]
            VERSION = tfds.core.Version("1.0.0")
            name = dataset_name

            def _info(self) -> Any:
                return tfds.core.DatasetInfo(
                    builder=self,
                    description="ctrain's synthetic shapes: five classes, made offline.",
                    features=tfds.features.FeaturesDict(
                        {
                            "image": tfds.features.Image(shape=(size, size, 3)),
                            "label": tfds.features.ClassLabel(names=list(SHAPE_CLASSES)),
                        }
                    ),
                    supervised_keys=("image", "label"),
                )

            def _split_generators(self, dl_manager: Any) -> dict[str, Any]:
                return {
                    "train": self._generate_examples(train, 1),
                    "test": self._generate_examples(test, 2),
                }

            def _generate_examples(self, count: int, seed: int) -> Iterator[tuple[int, Any]]:
                images, labels = synthetic_shapes(count, size, seed)
                for key, (image, label) in enumerate(zip(images, labels, strict=True)):
                    yield key, {"image": image, "label": int(label)}

        builder = Builder(data_dir=data_dir)
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(try_download_gcs=False)
        )
    return str(builder.data_dir)


def main(argv: list[str] | None = None) -> None:
    """python -m ctrain.train.demo_data tfds DATA_DIR [--train N --test N --size PX]"""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m ctrain.train.demo_data", description=main.__doc__
    )
    sub = parser.add_subparsers(dest="what", required=True)
    tfds_cmd = sub.add_parser("tfds", help="write the synthetic shapes as a TFDS dataset")
    tfds_cmd.add_argument("data_dir")
    tfds_cmd.add_argument("--train", type=int, default=512)
    tfds_cmd.add_argument("--test", type=int, default=128)
    tfds_cmd.add_argument("--size", type=int, default=64)
    tfds_cmd.add_argument("--name", default=TFDS_NAME)
    args = parser.parse_args(argv)
    print(write_tfds_shapes(args.data_dir, args.train, args.test, args.size, args.name))


if __name__ == "__main__":
    main()
