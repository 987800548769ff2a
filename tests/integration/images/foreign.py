"""Images without ctrain in them, as users have them, layered on ctrain's CPU image
(tests/integration/test_foreign_images.py says what each stands for):

- FOREIGN_HVD: Python + TensorFlow + Horovod + Open MPI, ctrain uninstalled, no entrypoint;
- FOREIGN_TF: the same without Horovod;
- FOREIGN_HVD as a SIF (lz4), readable by the unprivileged test user.

Each is a ``background.once`` build (marker ``builds("foreign")``)."""

from __future__ import annotations

import atexit
import hashlib
import shutil
import subprocess
from pathlib import Path

from tests import scratch

from . import ci_cpu_image
from .background import once, run

PIP = "/opt/ctrain/venv/bin/python -m pip uninstall --yes --quiet"
FOREIGN_HVD = f"""FROM {{base}}
RUN {PIP} ctrain-hpc && ! test -e /opt/ctrain/venv/bin/ctrain
ENTRYPOINT []
CMD ["python3"]
"""
FOREIGN_TF = f"""FROM {{base}}
RUN {PIP} horovod
"""
SIF_TIMEOUT = 900


def layered(name: str, dockerfile: str, base: str) -> str:
    """``dockerfile`` on ``base`` as ctrain-test/NAME:HASH (built when that tag is missing)."""
    base_id = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", base],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    text = dockerfile.format(base=base)
    tag = f"ctrain-test/{name}:{hashlib.sha256((text + base_id).encode()).hexdigest()[:12]}"
    # An earlier generation (another base, another recipe) would keep its base's 3 GB alive.
    listed = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", f"ctrain-test/{name}"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    for stale in set(listed) - {tag}:
        subprocess.run(["docker", "rmi", stale], capture_output=True, timeout=120)
    have = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60)
    if have.returncode != 0:
        done = run(["docker", "build", "--network", "none", "-t", tag, "-"], input=text,
                   timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    return tag


@once
def foreign_hvd() -> str:
    return layered("foreign-hvd", FOREIGN_HVD, ci_cpu_image())


@once
def foreign_tf() -> str:
    return layered("foreign-tf", FOREIGN_TF, foreign_hvd())


@once
def foreign_sif() -> Path:
    """FOREIGN_HVD as a SIF under /var/tmp (the test user reaches it; the checkout may be
    private), removed when the run ends."""
    image = foreign_hvd()
    directory = scratch.make("foreign")
    atexit.register(shutil.rmtree, directory, True)
    directory.chmod(0o755)
    sif = directory / "foreign.sif"
    done = run(["apptainer", "build", "--mksquashfs-args", "-comp lz4", str(sif),
                f"docker-daemon://{image}"], timeout=SIF_TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    sif.chmod(0o644)
    return sif


def all_foreign() -> None:
    """Every foreign build (a background lane's step)."""
    foreign_tf()
    foreign_sif()
