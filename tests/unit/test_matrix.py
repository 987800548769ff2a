"""src/ctrain/matrix.py: the version matrix's rows, pins, constraints and patch series, and the
command line the Makefile, the scripts and the recipes use."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctrain import matrix

TEXT = """
openmpi = "9.1"
horovod_nvcc = "7.7"
cuda12_driver = "500.1"

[[tensorflow]]
version = "3.2.1"
tf_keras = "3.2.0"
tensorboard = "3.2.2"
tensorflow_datasets = "5.0"
horovod = "1.0"
[tensorflow.cuda_wheels]
nvidia-cuda-runtime-cu12 = "12.9"
nvidia-cudnn-cu12 = "9.9"
nvidia-nccl-cu12 = "2.9"
nvidia-cublas-cu12 = "12.1"
[tensorflow.gpu_code]
cuda = "12.9"
sass = ["7.0", "8.0"]
ptx = "8.0"
driver = "575.1"
newest = "12.1"

[[tensorflow]]
version = "3.1.0"
tf_keras = "3.1.0"
tensorboard = "3.1.1"
tensorflow_datasets = "5.0"
horovod = "1.0"
[tensorflow.cuda_wheels]
nvidia-cuda-runtime-cu12 = "12.8"
nvidia-cudnn-cu12 = "9.8"
nvidia-nccl-cu12 = "2.8"
[tensorflow.gpu_code]
cuda = "12.8"
sass = ["6.0"]
ptx = "6.0"
driver = "570.1"
newest = "12.0"
"""
ROWS = matrix.parse(TEXT)
NEW, OLD = ROWS
SERIES = """# name  range
0001-a.patch all
0002-b.patch >=3.2   # from 3.2 on
0003-c.patch <3.2

"""


def test_parse_reads_every_row_in_order_with_the_shared_fields() -> None:
    assert [row.tensorflow for row in ROWS] == ["3.2.1", "3.1.0"]
    assert (NEW.tf_keras, NEW.tensorflow_datasets, NEW.horovod) == ("3.2.0", "5.0", "1.0")
    assert (NEW.tensorboard, OLD.tensorboard) == ("3.2.2", "3.1.1")
    assert NEW.openmpi == OLD.openmpi == "9.1"
    assert NEW.horovod_nvcc == OLD.horovod_nvcc == "7.7"
    assert OLD.cuda_wheels[matrix.NCCL] == "2.8"
    assert NEW.gpu_code == matrix.GpuCode("12.9", ("7.0", "8.0"), "8.0", "575.1", "12.1", "500.1")
    assert OLD.gpu_code.sass == ("6.0",) and OLD.gpu_code.cuda12_driver == "500.1"


def test_parse_refuses_a_matrix_without_tensorflow() -> None:
    with pytest.raises(matrix.MatrixError, match="no TensorFlow. Fix: restore"):
        matrix.parse('openmpi = "1"\nhorovod_nvcc = "1"\ntensorflow = []\n')


def test_the_repository_matrix_loads_and_has_every_cuda_pin() -> None:
    rows = matrix.load()
    assert rows and len({row.tensorflow for row in rows}) == len(rows)
    for row in rows:
        assert {matrix.CUDA_RUNTIME, matrix.CUDNN, matrix.NCCL} <= row.cuda_wheels.keys()


@pytest.mark.parametrize(("tf", "found"), [("3.2.1", "3.2.1"), ("3.1.0", "3.1.0")])
def test_find(tf: str, found: str) -> None:
    assert matrix.find(ROWS, tf).tensorflow == found


@pytest.mark.parametrize("tf", ["3.2", "3.2.0", "", "2.18.1"])
def test_find_names_the_versions_it_has(tf: str) -> None:
    with pytest.raises(matrix.MatrixError) as raised:
        matrix.find(ROWS, tf)
    assert str(raised.value) == (
        f"TensorFlow {tf} is not in ctrain's version matrix. "
        "Fix: TF_VERSION=3.2.1 or 3.1.0 (src/ctrain/matrix.toml)"
    )


def test_pins_of_each_flavour() -> None:
    common = {
        "TF_VERSION": "3.2.1",
        "KERAS_VERSION": "3.2.0",
        "TFDS_VERSION": "5.0",
        "HOROVOD_VERSION": "1.0",
        "OPENMPI_VERSION": "9.1",
    }
    assert matrix.pins(NEW, "gpu") == {
        "FLAVOUR": "gpu",
        **common,
        "CUDA_VERSION": "12.9",
        "CUDNN_VERSION": "9.9",
        "NCCL_VERSION": "2.9",
        "HOROVOD_NVCC_VERSION": "7.7",
    }
    assert matrix.pins(NEW, "cpu") == {"FLAVOUR": "cpu", **common} | dict.fromkeys(
        ("CUDA_VERSION", "CUDNN_VERSION", "NCCL_VERSION", "HOROVOD_NVCC_VERSION"), "none"
    )
    assert tuple(matrix.pins(NEW, "gpu")) == matrix.PIN_NAMES


@pytest.mark.parametrize("flavour", ["GPU", "rocm", ""])
def test_pins_refuse_an_unknown_flavour(flavour: str) -> None:
    with pytest.raises(matrix.MatrixError, match=f"flavour {flavour!r}. Fix: gpu or cpu"):
        matrix.pins(NEW, flavour)


def test_constraints_of_each_flavour() -> None:
    base = [
        "tensorflow==3.2.1",
        "tf-keras==3.2.0",
        "tensorboard==3.2.2",
        "tensorflow-datasets==5.0",
    ]
    assert matrix.constraints(NEW, "cpu") == base
    assert matrix.constraints(NEW, "gpu") == base + [
        "nvidia-cublas-cu12==12.1",
        "nvidia-cuda-runtime-cu12==12.9",
        "nvidia-cudnn-cu12==9.9",
        "nvidia-nccl-cu12==2.9",
    ]


@pytest.mark.parametrize(
    ("tf", "chosen"),
    [
        ("3.2.1", ["0001-a.patch", "0002-b.patch"]),
        ("3.3.0", ["0001-a.patch", "0002-b.patch"]),
        ("4.0.0", ["0001-a.patch", "0002-b.patch"]),
        ("3.1.9", ["0001-a.patch", "0003-c.patch"]),
        ("2.99.0", ["0001-a.patch", "0003-c.patch"]),
    ],
)
def test_series_ranges(tf: str, chosen: list[str]) -> None:
    assert matrix.series(SERIES, tf) == chosen


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("0001-a.patch", "patch series line 1: '0001-a.patch'. Fix: NAME TF-RANGE"),
        ("0001-a.patch all extra", "patch series line 1: '0001-a.patch all extra'. Fix: NAME"),
        ("0001-a.patch >3.2", "TensorFlow range '>3.2'. Fix: all, >=X.Y or <X.Y"),
        ("0001-a.patch >=3", "TensorFlow range '>=3'. Fix: all, >=X.Y or <X.Y"),
        ("0001-a.patch ALL", "TensorFlow range 'ALL'. Fix"),
    ],
)
def test_series_refuses_malformed_lines(line: str, message: str) -> None:
    with pytest.raises(matrix.MatrixError, match=re.escape(message)):
        matrix.series(line, "3.2.1")


def test_series_reads_the_repository_series() -> None:
    text = (Path(matrix.__file__).parents[2] / "patches/horovod-0.28.1/series").read_text()
    for row in matrix.load():
        assert matrix.series(text, row.tensorflow)  # every TensorFlow gets some patches


def test_run_answers_each_command(tmp_path: Path) -> None:
    series = tmp_path / "series"
    series.write_text(SERIES)
    assert matrix.run(["default"], ROWS) == ["3.2.1"]
    assert matrix.run(["versions"], ROWS) == ["3.2.1", "3.1.0"]
    assert matrix.run(["pins", "3.1.0", "cpu"], ROWS)[:2] == ["FLAVOUR=cpu", "TF_VERSION=3.1.0"]
    assert matrix.run(["constraints", "3.1.0", "cpu"], ROWS) == matrix.constraints(OLD, "cpu")
    assert matrix.run(["get", "3.2.1", "tf_keras"], ROWS) == ["3.2.0"]
    assert matrix.run(["get", "3.2.1", "openmpi"], ROWS) == ["9.1"]
    assert matrix.run(["patches", str(series), "3.1.0"], ROWS) == ["0001-a.patch", "0003-c.patch"]


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["defaults"],
        ["default", "extra"],
        ["pins", "3.2.1"],
        ["get", "3.2.1", "cuda_wheels"],
        ["get", "3.2.1", "nope"],
        ["constraints"],
    ],
)
def test_run_usage(argv: list[str]) -> None:
    with pytest.raises(matrix.MatrixError, match=r"^usage: matrix\.py default \| versions"):
        matrix.run(argv, ROWS)


def test_run_patches_checks_the_version_first(tmp_path: Path) -> None:
    with pytest.raises(matrix.MatrixError, match="TensorFlow 9.9.9 is not in"):
        matrix.run(["patches", str(tmp_path / "missing"), "9.9.9"], ROWS)


def run_main(*argv: str) -> subprocess.CompletedProcess[str]:
    """matrix.py as the scripts run it: a file, before ctrain is installed."""
    return subprocess.run(
        [sys.executable, str(matrix.MATRIX.with_name("matrix.py")), *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_main_prints_the_lines() -> None:
    done = run_main("versions")
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines() == [row.tensorflow for row in matrix.load()]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["pins", "0.0.1", "gpu"], "TensorFlow 0.0.1 is not in ctrain's version matrix. Fix:"),
        (["bogus"], "usage: matrix.py"),
        (["patches", "/nonexistent/series", "@DEFAULT@"], "No such file or directory"),
    ],
)
def test_main_exits_2_with_one_line(argv: list[str], message: str) -> None:
    default = matrix.load()[0].tensorflow
    done = run_main(*(arg.replace("@DEFAULT@", default) for arg in argv))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("matrix: error: ") and done.stderr.count("\n") == 1
    assert message in done.stderr
