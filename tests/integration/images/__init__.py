"""Test images built locally, once per source state (the tag is a hash of what goes in)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


def base_image() -> str:
    done = subprocess.run(
        [str(REPO / "scripts" / "base-image.sh")], capture_output=True, text=True, timeout=900
    )
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


def ci_cpu_image() -> str | None:
    """The CPU image of issue 7's recipe built in this CI run
    (tests/integration/test_built_images.py builds ctrain:ci-cpu from this checkout), or
    $CTRAIN_TEST_CPU_IMAGE."""
    wanted = os.environ.get("CTRAIN_TEST_CPU_IMAGE", "ctrain:ci-cpu")
    if shutil.which("docker") is None:
        return None
    found = subprocess.run(["docker", "image", "inspect", wanted], capture_output=True, timeout=60)
    return wanted if found.returncode == 0 else None
