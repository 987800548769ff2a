"""`ctrain data import` on an image folder made here (PNG files from numpy), then loading it
through the training API with every network connection refused, and training on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.helpers import CTRAIN
from tests.support.real_runs import clean_env

pytestmark = [pytest.mark.tensorflow, pytest.mark.timeout(600)]
CLASSES = {"circle": 0, "square": 1, "stripes": 2}

# Runs in a fresh interpreter: every socket connection fails, the proxies point nowhere, and the
# dataset is read through ctx.load_dataset, then one epoch of training runs on it.
OFFLINE = """
import json, socket, sys
def refuse(*args, **kwargs):
    raise OSError("network access attempted")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
import ctrain.distributed
ctx = ctrain.distributed.init()
import tensorflow as tf
name, data_dir = sys.argv[1], sys.argv[2]
train = ctx.load_dataset(name, "train", data_dir=data_dir)
rows = [(e["filename"].numpy().decode(), int(e["label"]), e["image"].numpy().tolist())
        for e in train]
pairs = ctx.load_dataset(name, "train", data_dir=data_dir, as_supervised=True)
pairs = pairs.map(lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)).batch(4)
with ctx.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8, 8, 1)), tf.keras.layers.Flatten(),
                                 tf.keras.layers.Dense(3)])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
history = model.fit(pairs, epochs=1, verbose=0)
test = ctx.load_dataset(name, "test", data_dir=data_dir)
print(json.dumps({"rows": rows, "loss": history.history["loss"], "test": len(list(test))}))
"""


def png(pixels: np.ndarray) -> bytes:
    import tensorflow as tf

    return bytes(tf.io.encode_png(pixels).numpy())


def pattern(kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:8, 0:8]
    if kind == "circle":
        image = ((y - 3.5) ** 2 + (x - 3.5) ** 2 < 9) * 200
    elif kind == "square":
        image = ((abs(y - 3.5) < 2.5) & (abs(x - 3.5) < 2.5)) * 200
    else:
        image = (x % 2) * 200
    return (image + rng.integers(0, 50, size=(8, 8))).astype(np.uint8)[..., None]


def make_folder(root: Path) -> dict[str, np.ndarray]:
    """root/{train,test}/CLASS/N.png, 4 train and 1 test image per class, plus a stray file."""
    made = {}
    seed = 0
    for split, count in (("train", 4), ("test", 1)):
        for kind in CLASSES:
            (root / split / kind).mkdir(parents=True)
            for n in range(count):
                seed += 1
                pixels = pattern(kind, seed)
                (root / split / kind / f"{n}.png").write_bytes(png(pixels))
                made[f"{split}/{kind}/{n}.png"] = pixels
    (root / "train" / "circle" / "README.txt").write_text("not an image")
    return made


def test_import_then_load_offline_and_train(tmp_path: Path) -> None:
    made = make_folder(tmp_path / "shapes")
    data_dir = tmp_path / "datasets"
    done = subprocess.run(
        [CTRAIN, "data", "import", str(tmp_path / "shapes"), "--name", "shapes"]
        + ["--data-dir", str(data_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout[done.stdout.index("{") :])
    assert summary["splits"] == {"train": 12, "test": 3}
    assert summary["classes"] == list(CLASSES)
    assert (data_dir / "shapes" / "1.0.0" / "dataset_info.json").is_file()

    again = subprocess.run(
        [CTRAIN, "data", "import", str(tmp_path / "shapes"), "--name", "shapes"]
        + ["--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert again.returncode == 2 and "--overwrite" in again.stderr

    dead = "http://127.0.0.1:9"
    loaded = subprocess.run(
        [sys.executable, "-c", OFFLINE, "shapes", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        env=clean_env(
            TF_CPP_MIN_LOG_LEVEL="3", http_proxy=dead, https_proxy=dead, HTTPS_PROXY=dead
        ),
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    result = json.loads(loaded.stdout.strip().splitlines()[-1])
    rows = {name: (label, pixels) for name, label, pixels in result["rows"]}
    train = {k: v for k, v in made.items() if k.startswith("train/")}
    assert set(rows) == set(train)
    for name, pixels in train.items():
        label, loaded_pixels = rows[name]
        assert label == CLASSES[name.split("/")[1]]
        assert np.array_equal(np.array(loaded_pixels, dtype=np.uint8), pixels)  # lossless PNG
    assert result["test"] == 3
    assert np.isfinite(result["loss"][0])


def test_loading_a_missing_dataset_names_the_fetch_command(tmp_path: Path) -> None:
    code = (
        "import ctrain.train.data as d\n"
        "from ctrain.errors import DataError\n"
        "try:\n"
        "    d.load('mnist', 'train', directory=" + repr(str(tmp_path)) + ")\n"
        "except DataError as e:\n"
        "    print(e.line())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=clean_env()
    )
    assert f"ctrain data fetch mnist --data-dir {tmp_path}" in done.stdout, done.stderr[-2000:]
