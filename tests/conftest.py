"""Markers for tests that need real services.

Outside CI a missing service skips the test with the reason; with CI=true it fails, so a CI run
can never pass by skipping the real Slurm, MPI, Docker, TensorFlow or Horovod tests.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess

import pytest


def _run_ok(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def missing(marker: str) -> str | None:
    """Why the service behind ``marker`` is unusable, or None when it is there."""
    if marker == "slurm":
        if not shutil.which("srun"):
            return "srun not found (make system)"
        if not _run_ok(["srun", "-n", "1", "-t", "1", "true"]):
            return "Slurm does not run jobs (make services)"
    elif marker == "mpi":
        if not shutil.which("mpirun"):
            return "mpirun not found (make system)"
    elif marker == "docker":
        if not shutil.which("docker"):
            return "docker not found (make system)"
        if not _run_ok(["docker", "info"]):
            return "the Docker engine is not running (make services)"
    elif marker in ("tensorflow", "horovod") and importlib.util.find_spec(marker) is None:
        return f"{marker} is not importable (make install)"
    return None


SERVICE_MARKERS = ("slurm", "mpi", "docker", "tensorflow", "horovod")


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in SERVICE_MARKERS:
        if item.get_closest_marker(marker) is None:
            continue
        reason = missing(marker)
        if reason is None:
            continue
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {marker} is unavailable: {reason}", pytrace=False)
        pytest.skip(reason)
