"""The examples for real, at tiny sizes: the MNIST-style CNN, ResNet-50 transfer learning on a
TFDS dataset made here (and on an image folder), and the synthetic benchmark."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN
from tests.support.real_runs import BIN, clean_env, run

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PYTHON = str(BIN / "python")
SRUN = ["srun", "-t", "10", "--kill-on-bad-exit=1"]
TINY_TRANSFER = ["--image-size", "32", "--batch", "4", "--epochs", "2", "--steps-per-epoch", "2"]


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prepared TFDS dataset (TFRecords + metadata) written offline by ctrain.train.demo_data."""
    data_dir = tmp_path_factory.mktemp("tfds")
    argv = [PYTHON, "-m", "ctrain.train.demo_data", "tfds", str(data_dir), "--train", "40",
            "--test", "16", "--size", "40"]  # fmt: skip
    run(argv, clean_env(), timeout=180)
    assert (data_dir / "ctrain_shapes" / "1.0.0" / "dataset_info.json").is_file()
    return data_dir


def report(directory: Path, rank: int = 0) -> dict[str, object]:
    data: dict[str, object] = json.loads((directory / f"rank{rank}.json").read_text())
    return data


@pytest.mark.tensorflow
def test_mnist_cnn_trains_and_the_chief_writes_checkpoints_and_logs(tmp_path: Path) -> None:
    done = run(
        [PYTHON, str(EXAMPLES / "mnist_cnn.py"), "--epochs", "2", "--out", str(tmp_path)],
        clean_env(),
    )
    line = re.search(r"ctrain demo: mode=single .*test_accuracy=([\d.]+)", done.stdout)
    assert line, done.stdout
    assert float(line.group(1)) > 0.5  # the synthetic digits are learnable
    assert (tmp_path / "checkpoints" / "epoch-02.weights.h5").is_file()
    assert list((tmp_path / "logs").rglob("events.out.tfevents.*"))


@pytest.mark.tensorflow
def test_resnet50_transfer_reads_a_tfds_data_dir_and_loads_local_weights(
    tmp_path: Path, tfds_dir: Path
) -> None:
    weights = tmp_path / "resnet50_notop.h5"  # as a user copies Keras' ImageNet file over
    make = (
        "import sys, tf_keras as k; k.applications.ResNet50(include_top=False, weights=None, "
        "input_shape=(32, 32, 3)).save_weights(sys.argv[1])"
    )
    run([PYTHON, "-c", make, str(weights)], clean_env())
    out, reports = tmp_path / "run", tmp_path / "reports"
    done = run(
        [
            PYTHON,
            str(EXAMPLES / "resnet50_transfer.py"),
            "--data-dir",
            str(tfds_dir),
            "--dataset",
            "ctrain_shapes",
            *TINY_TRANSFER,
            "--weights",
            str(weights),
            "--out",
            str(out),
            "--report",
            str(reports),
        ],  # fmt: skip
        clean_env(),
    )
    assert "ctrain_shapes:train, 40 examples, 5 classes, 32px, mode=single" in done.stdout
    found = report(reports)
    assert found["weights"] == str(weights) and found["base_trainable"] is False
    assert found["source"] == "ctrain_shapes:train" and found["steps_per_epoch"] == 2
    assert 0.0 <= float(found["val_accuracy"]) <= 1.0  # type: ignore[arg-type]
    assert len(found["loss"]) == 2  # type: ignore[arg-type]
    assert float(found["images_per_second"]) > 0  # type: ignore[arg-type]
    assert (out / "checkpoints" / "final.weights.h5").is_file()
    assert list((out / "logs").rglob("events.out.tfevents.*"))


@pytest.mark.slurm
@pytest.mark.tensorflow
def test_resnet50_transfer_multiworker_under_srun(tmp_path: Path, tfds_dir: Path) -> None:
    out, reports = tmp_path / "run", tmp_path / "reports"
    run(
        [
            *SRUN,
            "-n",
            "2",
            CTRAIN,
            "launch",
            "--",
            PYTHON,
            str(EXAMPLES / "resnet50_transfer.py"),
            "--data-dir",
            str(tfds_dir),
            "--dataset",
            "ctrain_shapes",
            *TINY_TRANSFER,
            "--threads",
            "1",
            "--val-split",
            "none",
            "--out",
            str(out),
            "--report",
            str(reports),
        ],  # fmt: skip
        clean_env(),
        timeout=400,
    )
    chief, worker = report(reports, 0), report(reports, 1)
    assert chief["mode"] == worker["mode"] == "multiworker"
    assert chief["replicas"] == 2 and chief["base_trainable"] is True  # no weights: all trained
    assert chief["loss"] == worker["loss"]  # one model, in sync
    assert (out / "checkpoints" / "final.weights.h5").is_file()  # the chief's, in --out


@pytest.mark.tensorflow
def test_resnet50_transfer_image_folder_pipeline(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    make = (
        "import sys, pathlib, tensorflow as tf\n"
        "from ctrain.train.demo_data import synthetic_shapes, SHAPE_CLASSES\n"
        "x, y = synthetic_shapes(24, 48, seed=5)\n"
        "for i, (img, label) in enumerate(zip(x, y)):\n"
        "    split = 'train' if i < 16 else 'test'\n"
        "    d = pathlib.Path(sys.argv[1], split, SHAPE_CLASSES[label]); d.mkdir(parents=True,"
        " exist_ok=True)\n"
        "    tf.io.write_file(str(d / f'{i}.jpg'), tf.io.encode_jpeg(img))\n"
    )
    run([PYTHON, "-c", make, str(folder)], clean_env())
    reports = tmp_path / "reports"
    done = run(
        [
            PYTHON,
            str(EXAMPLES / "resnet50_transfer.py"),
            "--image-folder",
            str(folder),
            "--image-size",
            "32",
            "--batch",
            "4",
            "--pipeline-only",
            "--epochs",
            "2",
            "--report",
            str(reports),
        ],  # fmt: skip
        clean_env(),
    )
    assert "pipeline alone:" in done.stdout
    found = report(reports)
    assert found["steps_per_epoch"] == 4  # 16 training images, batches of 4
    assert float(found["pipeline_images_per_second"]) > 0  # type: ignore[arg-type]


@pytest.mark.tensorflow
def test_resnet50_transfer_says_how_to_get_a_missing_dataset(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [
            PYTHON,
            str(EXAMPLES / "resnet50_transfer.py"),
            "--data-dir",
            str(tmp_path),
            "--dataset",
            "tf_flowers",
        ],  # fmt: skip
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert f"dataset tf_flowers is not prepared in {tmp_path}" in done.stderr
    assert f"ctrain data fetch tf_flowers --data-dir {tmp_path}" in done.stderr
    assert "python -m ctrain.train.demo_data tfds DIR" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.tensorflow
def test_synthetic_benchmark_reports_like_horovods(tmp_path: Path) -> None:
    done = run(
        [
            PYTHON,
            "-m",
            "ctrain.bench.synthetic",
            "--model",
            "MobileNetV2",
            "--image-size",
            "32",
            "--batch-size",
            "8",
            "--num-warmup-batches",
            "2",
            "--num-batches-per-iter",
            "2",
            "--num-iters",
            "3",
            "--threads",
            "1",
            "--report",
            str(tmp_path),
        ],  # fmt: skip
        clean_env(),
    )
    assert "Model: MobileNetV2" in done.stdout
    assert len(re.findall(r"^Iter #\d: [\d.]+ img/sec per worker$", done.stdout, re.M)) == 3
    per = re.search(r"^Img/sec per worker: ([\d.]+) \+-([\d.]+)$", done.stdout, re.M)
    total = re.search(r"^Total img/sec on 1 worker\(s\): ([\d.]+) \+-[\d.]+$", done.stdout, re.M)
    assert per and total and float(per.group(1)) == pytest.approx(float(total.group(1)), 0.01)
    found = report(tmp_path)
    assert len(found["rates"]) == 3  # type: ignore[arg-type]
    assert float(found["peak_rss_mb"]) > 100  # type: ignore[arg-type]
    assert float(found["first_step_at"]) > float(found["started_at"])  # type: ignore[arg-type]
