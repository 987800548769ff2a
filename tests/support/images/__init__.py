"""Test images built locally, once per source state (the tag is a hash of what goes in).

The slow ones (the base, the wheelhouses, the CPU and GPU images, the CPU SIF, another
TensorFlow's venv and image) are ``background.once`` builds: one build per run, shared by every
test that asks, and started in the background as soon as the run is collected (tests/conftest.py:
a test module says which it needs with the marker ``builds``, and ``LANES`` says in which order
they are made)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from ctrain import __version__, matrix

from .background import once, run

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static (make system)
BUSYBOX_BASE = "ctrain-test/busybox-base:1"
TAG = "ci"  # the tag of the images the tests build: ctrain:ci-cpu, ctrain:ci, ...
BUILD_TIMEOUT = 3600  # a cold GPU build on 2 cores; warm builds take seconds
DEFAULT = matrix.load()[0].tensorflow  # the matrix's default TensorFlow
OTHERS = tuple(row.tensorflow for row in matrix.load()[1:])  # every other TensorFlow of it
VENV_TIMEOUT = 1800  # another TensorFlow's venv: TensorFlow from PyPI, Horovod built

# label -> the pin it shows
LABEL_PINS = {
    "io.ctrain.ctrain.version": "CTRAIN_VERSION",
    "io.ctrain.tensorflow.version": "TF_VERSION",
    "io.ctrain.keras.version": "KERAS_VERSION",
    "io.ctrain.tensorflow-datasets.version": "TFDS_VERSION",
    "io.ctrain.horovod.version": "HOROVOD_VERSION",
    "io.ctrain.openmpi.version": "OPENMPI_VERSION",
    "io.ctrain.cuda.version": "CUDA_VERSION",
    "io.ctrain.cudnn.version": "CUDNN_VERSION",
    "io.ctrain.nccl.version": "NCCL_VERSION",
    "io.ctrain.horovod.nvcc.version": "HOROVOD_NVCC_VERSION",
}


def pins(tf: str, flavour: str) -> dict[str, str]:
    """The labels' versions: the matrix's pins and ctrain's version."""
    return matrix.pins(matrix.find(matrix.load(), tf), flavour) | {"CTRAIN_VERSION": __version__}


@once
def base_image() -> str:
    """The local Debian 12 base image (scripts/base-image.sh)."""
    done = run([str(REPO / "scripts" / "base-image.sh")], timeout=900)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _source_hash(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for path in sorted((REPO / "src" / "ctrain").rglob("*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode() + path.read_bytes())
    for part in parts:
        digest.update(part)
    return digest.hexdigest()[:12]


def ctrain_min_image() -> str:
    """ctrain's source on the Debian base image; rebuilt only when the source changes."""
    base = base_image()
    dockerfile = (HERE / "ctrain-min.Dockerfile").read_bytes()
    name = f"ctrain-min:{_source_hash(dockerfile, base.encode())}"
    listed = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "ctrain-min"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    for stale in set(listed) - {name}:  # one per source state ever built would pile up
        subprocess.run(["docker", "rmi", stale], capture_output=True, timeout=120)
    if (
        subprocess.run(
            ["docker", "image", "inspect", name], capture_output=True, timeout=60
        ).returncode
        == 0
    ):
        return name
    with tempfile.TemporaryDirectory() as context:
        shutil.copytree(
            REPO / "src" / "ctrain",
            Path(context) / "ctrain",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        done = subprocess.run(
            [
                "docker",
                "build",
                "--network",
                "none",
                "--build-arg",
                f"BASE_IMAGE={base}",
                "-f",
                str(HERE / "ctrain-min.Dockerfile"),
                "-t",
                name,
                context,
            ],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    return name


def make(
    *args: str, tag: str = TAG, timeout: float = BUILD_TIMEOUT, apptainer: bool = False
) -> tuple[float, str]:
    """Run a make target in the repository with Docker (APPTAINER blanked: the image targets
    would build a SIF where apptainer is installed), or with ``apptainer``; its wall time in
    seconds and its output."""
    t0 = time.monotonic()
    engine = [] if apptainer else ["APPTAINER="]
    done = run(
        ["make", "--no-print-directory", "-C", str(REPO), *args, *engine, f"TAG={tag}"],
        timeout=timeout,
        env={**os.environ, "PYTHON": "python3"},
    )
    elapsed = time.monotonic() - t0
    assert done.returncode == 0, (
        f"make {' '.join(args)}\n{done.stdout[-6000:]}\n{done.stderr[-6000:]}"
    )
    print(f"make {' '.join(args)}: {elapsed:.0f} s")
    return elapsed, done.stdout + done.stderr


def drop_build_contexts() -> None:
    """Remove BuildKit's copies of the build contexts that no build is using: the wheelhouses,
    3.6 GB for the GPU image and 0.8 GB for each CPU one, kept otherwise for the rest of the run
    (a later build of the same context sends it again, in seconds; the layers stay cached)."""
    done = run(
        ["docker", "builder", "prune", "--force", "--filter", "type=source.local"], timeout=300
    )
    assert done.returncode == 0, done.stderr


@once
def wheelhouse(flavour: str, tf: str) -> None:
    """`make wheelhouse` of ``flavour`` and TensorFlow ``tf``."""
    make("wheelhouse", f"FLAVOUR={flavour}", f"TF_VERSION={tf}")


@once
def matrix_venv(tf: str) -> Path:
    """The venv of another TensorFlow of the matrix, as `make test-matrix` makes it
    (.venv-tfVERSION, `make install`): its Horovod wheel, built once into the wheel cache, is the
    one that TensorFlow's CPU image installs (scripts/wheelhouse.sh), so Horovod is compiled once
    per TensorFlow and the matrix's own `make install` later finds everything made."""
    venv = f".venv-tf{tf}"
    make("install", f"VENV={venv}", f"TF_VERSION={tf}", timeout=VENV_TIMEOUT)
    return REPO / venv


@once
def cpu_image(tf: str) -> str:
    """The CPU image of TensorFlow ``tf`` built from this checkout's recipe (seconds when
    Docker's layer cache has it), as the Makefile names it: the default TensorFlow's TAG-cpu,
    another's TAG-tfVERSION-cpu."""
    if tf != DEFAULT:
        matrix_venv(tf)
    base = base_image()
    wheelhouse("cpu", tf)
    make("image-cpu", f"BASE_IMAGE={base}", f"TF_VERSION={tf}")
    drop_build_contexts()
    return f"ctrain:{TAG}-cpu" if tf == DEFAULT else f"ctrain:{TAG}-tf{tf}-cpu"


def ci_cpu_image() -> str:
    """The CPU image of the default TensorFlow from this checkout (ctrain:ci-cpu), or
    $CTRAIN_TEST_CPU_IMAGE as it is."""
    return os.environ.get("CTRAIN_TEST_CPU_IMAGE") or cpu_image(DEFAULT)


def other_cpu_images() -> list[str]:
    """The CPU image of every other TensorFlow of the matrix."""
    return [cpu_image(tf) for tf in OTHERS]


@once
def gpu_image() -> str:
    """The GPU image of the default TensorFlow (ctrain:TAG), built on this GPU-less machine (its
    wheels first: their download needs no base image)."""
    wheelhouse("gpu", DEFAULT)
    base = base_image()
    make("image", f"BASE_IMAGE={base}", f"TF_VERSION={DEFAULT}")
    drop_build_contexts()
    return f"ctrain:{TAG}"


@dataclasses.dataclass(frozen=True)
class BuiltSif:
    path: Path
    output: str  # make's and apptainer build's
    seconds: float


@once
def ci_cpu_sif() -> BuiltSif:
    """The CPU SIF of the default TensorFlow, built once per run by the real `apptainer
    build` of definitions/ctrain-cpu.def, as `make image-cpu` runs it where Apptainer is
    installed: from the wheelhouse, bootstrapped from the Debian base in the Docker daemon
    (BASE_IMAGE), as root with --fakeroot (this sandbox's root lacks a capability %post asks
    for; `make system` gives root the subordinate ids it needs), its %test run."""
    base = base_image()
    wheelhouse("cpu", DEFAULT)
    flags = "APPTAINER_BUILD_FLAGS=--fakeroot --force"
    seconds, output = make("image-cpu", f"BASE_IMAGE={base}", flags, apptainer=True)
    return BuiltSif(REPO / "build" / f"ctrain-{TAG}-cpu.sif", output, seconds)


def busybox_tar() -> bytes:
    """A root filesystem holding only a static busybox and an sh link to it (fixed mtimes, so
    the layer is the same on every run)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("bin",):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        data = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname, link.mtime = tarfile.SYMTYPE, "busybox", 0
        tar.addfile(link)
    return buffer.getvalue()


def busybox_base() -> str:
    """A one-layer local image of ``busybox_tar`` (imported once: the layer never changes)."""
    assert BUSYBOX.is_file(), f"{BUSYBOX} missing (make system installs busybox-static)"
    found = subprocess.run(
        ["docker", "image", "inspect", BUSYBOX_BASE], capture_output=True, timeout=60
    )
    if found.returncode != 0:
        subprocess.run(
            ["docker", "import", "--change", 'CMD ["/bin/sh"]', "-", BUSYBOX_BASE],
            input=busybox_tar(),
            capture_output=True,
            timeout=180,
            check=True,
        )
    return BUSYBOX_BASE


PUSH_TIMEOUT = 900  # the CPU SIF into the local registry, the first time


@once
def ci_cpu_sif_in_registry() -> str:
    """The CPU SIF (or $CTRAIN_TEST_CPU_SIF as it is) pushed to the local registry (`make
    services`) as ``oras://...``, as `make push` does: once per session, by whichever test asks
    first."""
    ref = f"oras://127.0.0.1:5000/ctrain-test/ctrain-cpu-sif:{TAG}"
    sif = os.environ.get("CTRAIN_TEST_CPU_SIF") or str(ci_cpu_sif().path)
    done = run(["apptainer", "push", sif, ref], timeout=PUSH_TIMEOUT)
    assert done.returncode == 0, done.stderr
    return ref
