"""ctrain's version matrix (matrix.toml): which TensorFlow, tf-keras, Horovod and CUDA wheels go
together, and which of ctrain's Horovod patches each TensorFlow needs.

The functions are pure; ``main`` answers the Makefile, the shell scripts and the image recipes,
which run it as a file (``python3 src/ctrain/matrix.py pins 2.21.0 gpu``) before ctrain is
installed: this module imports nothing from ctrain.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MATRIX = Path(__file__).with_name("matrix.toml")
FLAVOURS = ("gpu", "cpu")
NONE = "none"  # a CUDA pin of the CPU flavour
CUDA_RUNTIME, CUDNN, NCCL = "nvidia-cuda-runtime-cu12", "nvidia-cudnn-cu12", "nvidia-nccl-cu12"
# The pins the recipes take (Dockerfile.gpu's ARGs, the definitions' {{ }} build args),
# besides CTRAIN_VERSION, which is pyproject.toml's.
PIN_NAMES = (
    "FLAVOUR",
    "TF_VERSION",
    "KERAS_VERSION",
    "TFDS_VERSION",
    "HOROVOD_VERSION",
    "OPENMPI_VERSION",
    "CUDA_VERSION",
    "CUDNN_VERSION",
    "NCCL_VERSION",
    "HOROVOD_NVCC_VERSION",
)


class MatrixError(ValueError):
    """A version or file the matrix does not have; the message ends with a fix."""


@dataclass(frozen=True)
class GpuCode:
    """The GPU code in a TensorFlow wheel and what it needs (matrix.toml's gpu_code)."""

    cuda: str  # the CUDA it was built with
    sass: tuple[str, ...]  # compute capabilities with machine code
    ptx: str  # the compute capability of its PTX
    driver: str  # the driver its CUDA needs in full (the PTX JIT)
    newest: str  # the newest compute capability it is reported to run on
    cuda12_driver: str  # the oldest driver that runs CUDA 12 code at all


@dataclass(frozen=True)
class Row:
    """One TensorFlow of the matrix and what goes with it."""

    tensorflow: str
    tf_keras: str
    tensorboard: str
    tensorflow_datasets: str
    horovod: str
    openmpi: str
    horovod_nvcc: str
    cuda_wheels: Mapping[str, str]
    gpu_code: GpuCode


def parse(text: str) -> tuple[Row, ...]:
    """The rows of matrix.toml's text, the default first."""
    if sys.version_info >= (3, 11):  # here: a rank's start imports this module, not the table
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    data = tomllib.loads(text)
    rows = tuple(
        Row(
            tensorflow=entry["version"],
            tf_keras=entry["tf_keras"],
            tensorboard=entry["tensorboard"],
            tensorflow_datasets=entry["tensorflow_datasets"],
            horovod=entry["horovod"],
            openmpi=data["openmpi"],
            horovod_nvcc=data["horovod_nvcc"],
            cuda_wheels=dict(entry["cuda_wheels"]),
            gpu_code=GpuCode(
                cuda=entry["gpu_code"]["cuda"],
                sass=tuple(entry["gpu_code"]["sass"]),
                ptx=entry["gpu_code"]["ptx"],
                driver=entry["gpu_code"]["driver"],
                newest=entry["gpu_code"]["newest"],
                cuda12_driver=data["cuda12_driver"],
            ),
        )
        for entry in data["tensorflow"]
    )
    if not rows:
        raise MatrixError("the matrix lists no TensorFlow. Fix: restore src/ctrain/matrix.toml")
    return rows


def load(path: Path = MATRIX) -> tuple[Row, ...]:
    return parse(path.read_text(encoding="utf-8"))


def versions(rows: Sequence[Row]) -> list[str]:
    return [row.tensorflow for row in rows]


def find(rows: Sequence[Row], tf_version: str) -> Row:
    """The row of ``tf_version``."""
    for row in rows:
        if row.tensorflow == tf_version:
            return row
    raise MatrixError(
        f"TensorFlow {tf_version} is not in ctrain's version matrix. "
        f"Fix: TF_VERSION={' or '.join(versions(rows))} (src/ctrain/matrix.toml)"
    )


def pins(row: Row, flavour: str) -> dict[str, str]:
    """The recipes' pins (PIN_NAMES) for ``flavour``: the CPU flavour has no CUDA."""
    if flavour not in FLAVOURS:
        raise MatrixError(f"flavour {flavour!r}. Fix: gpu or cpu")
    gpu = flavour == "gpu"
    return {
        "FLAVOUR": flavour,
        "TF_VERSION": row.tensorflow,
        "KERAS_VERSION": row.tf_keras,
        "TFDS_VERSION": row.tensorflow_datasets,
        "HOROVOD_VERSION": row.horovod,
        "OPENMPI_VERSION": row.openmpi,
        "CUDA_VERSION": row.cuda_wheels[CUDA_RUNTIME] if gpu else NONE,
        "CUDNN_VERSION": row.cuda_wheels[CUDNN] if gpu else NONE,
        "NCCL_VERSION": row.cuda_wheels[NCCL] if gpu else NONE,
        "HOROVOD_NVCC_VERSION": row.horovod_nvcc if gpu else NONE,
    }


def constraints(row: Row, flavour: str) -> list[str]:
    """pip constraints holding a venv or a wheelhouse to ``row``: TensorFlow, tf-keras,
    TensorBoard, tensorflow-datasets and, for gpu, every CUDA wheel of tensorflow[and-cuda]."""
    lines = [
        f"tensorflow=={row.tensorflow}",
        f"tf-keras=={row.tf_keras}",
        f"tensorboard=={row.tensorboard}",
        f"tensorflow-datasets=={row.tensorflow_datasets}",
    ]
    if flavour == "gpu":
        lines += [f"{name}=={version}" for name, version in sorted(row.cuda_wheels.items())]
    return lines


def mismatches(row: Row, installed: Mapping[str, str]) -> list[str]:
    """The installed distributions (name -> version) whose version is not ``row``'s, as
    ``"tf-keras 2.18.0 (matrix: 2.21.0)"``; distributions not installed are not compared."""
    wanted = {"tf-keras": row.tf_keras, "horovod": row.horovod, **row.cuda_wheels}
    return [
        f"{name} {installed[name]} (matrix: {version})"
        for name, version in wanted.items()
        if name in installed and installed[name] != version
    ]


def describe_install(version: str, dists: Mapping[str, str]) -> str:
    """TensorFlow's version and those that go with it: tf-keras, Keras, Horovod and, in a GPU
    install, TensorFlow's CUDA runtime, cuDNN and NCCL wheels."""
    parts = [version, f"tf_keras {dists.get('tf-keras', 'missing')}"]
    parts += [f"{name} {dists[name]}" for name in ("keras", "horovod") if name in dists]
    cuda = (("CUDA", CUDA_RUNTIME), ("cuDNN", CUDNN), ("NCCL", NCCL))
    parts += [f"{label} {dists[name]}" for label, name in cuda if name in dists]
    return ", ".join(parts)


def off_matrix(rows: Sequence[Row], version: str, dists: Mapping[str, str]) -> str:
    """How an install differs from the rows of the matrix; "" if it is one."""
    try:
        row = find(rows, version)
    except MatrixError:
        return f"TensorFlow {version} is not in ctrain's version matrix"
    return ", ".join(mismatches(row, dists))


def reinstall_fix(rows: Sequence[Row], version: str) -> str:
    """Reinstall a row of the matrix: this TensorFlow's when it has one."""
    known = versions(rows)
    wanted = version if version in known else " or ".join(known)
    return (
        f"TF_VERSION={wanted} make install (src/ctrain/matrix.toml), or run inside the ctrain image"
    )


_SPEC = re.compile(r"^(all|(>=|<)(\d+)\.(\d+))$")


def _applies(spec: str, tf_version: str) -> bool:
    tf_range = _SPEC.match(spec)
    if tf_range is None:
        raise MatrixError(f"patch series: TensorFlow range {spec!r}. Fix: all, >=X.Y or <X.Y")
    if tf_range[1] == "all":
        return True
    major, minor = (int(part) for part in tf_version.split(".")[:2])
    at_least = (major, minor) >= (int(tf_range[3]), int(tf_range[4]))
    return at_least if tf_range[2] == ">=" else not at_least


def series(text: str, tf_version: str) -> list[str]:
    """The patches of a ``series`` file (``NAME TF-RANGE`` lines, ``#`` comments) that apply to
    ``tf_version``, in the file's order."""
    chosen = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if len(fields) != 2:
            raise MatrixError(f"patch series line {number}: {line!r}. Fix: NAME TF-RANGE")
        name, spec = fields
        if _applies(spec, tf_version):
            chosen.append(name)
    return chosen


def _usage() -> str:
    return (
        "usage: matrix.py default | versions | pins TF FLAVOUR | constraints TF FLAVOUR"
        " | get TF FIELD | patches SERIES TF"
    )


def run(argv: Sequence[str], rows: Sequence[Row]) -> list[str]:
    """The lines ``main`` prints for ``argv``."""
    match list(argv):
        case ["default"]:
            return [rows[0].tensorflow]
        case ["versions"]:
            return versions(rows)
        case ["pins", tf, flavour]:
            return [f"{name}={value}" for name, value in pins(find(rows, tf), flavour).items()]
        case ["constraints", tf, flavour]:
            return constraints(find(rows, tf), flavour)
        case ["get", tf, field] if field in Row.__dataclass_fields__ and field not in (
            "cuda_wheels",
            "gpu_code",
        ):
            return [str(getattr(find(rows, tf), field))]
        case ["patches", path, tf]:
            find(rows, tf)
            return series(Path(path).read_text(encoding="utf-8"), tf)
    raise MatrixError(_usage())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        lines = run(sys.argv[1:] if argv is None else argv, load())
    except (MatrixError, OSError) as error:
        print(f"matrix: error: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
