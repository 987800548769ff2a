"""The builds a test module can ask for with the marker ``builds(NAME, ...)``, and how the
background makes them (tests/conftest.py starts the lanes a run needs when it is collected)."""

from __future__ import annotations

from collections.abc import Callable, Collection

from . import ci_cpu_image, ci_cpu_sif, gpu_image, other_cpu_images
from .foreign import all_foreign

BUILDS: dict[str, Callable[[], object]] = {
    "cpu-image": ci_cpu_image,  # the default TensorFlow's CPU image (Docker)
    "cpu-sif": ci_cpu_sif,  # the same from definitions/ctrain-cpu.def (Apptainer)
    "foreign": all_foreign,  # the images without ctrain, on the CPU image, and their SIF
    "other-cpu-images": other_cpu_images,  # every other TensorFlow's venv and CPU image
    "gpu-image": gpu_image,  # the GPU image (Docker)
}
# Side by side, each in order. A build that needs another's result (the base image, a
# wheelhouse) waits for whichever lane makes it first.
LANES = (
    ("cpu-image", "foreign"),
    ("cpu-sif", "other-cpu-images"),
    ("gpu-image",),
)
# The order in which the builds are expected to be ready: the test modules that need the earlier
# ones run first.
ORDER = ("cpu-image", "cpu-sif", "foreign", "other-cpu-images", "gpu-image")
READY = {name: rank for rank, name in enumerate(ORDER)}


def unknown(names: Collection[str]) -> set[str]:
    return set(names) - set(BUILDS)


def lanes(wanted: Collection[str]) -> list[list[Callable[[], object]]]:
    """The lanes that make ``wanted``, each with only its wanted builds."""
    chosen = [[BUILDS[name] for name in lane if name in wanted] for lane in LANES]
    return [lane for lane in chosen if lane]


def ready_rank(names: Collection[str]) -> int:
    """When the last of ``names`` is expected to be ready, as a rank (-1 for none)."""
    return max((READY[name] for name in names), default=-1)
