"""The images keep what RDMA needs (``ctrain doctor --network`` checks it on a node): rdma-core's
libibverbs, Debian's ibverbs-providers and an Open MPI with UCX.

Every recipe runs docker/install.sh's ``system`` step (Dockerfile.gpu by name, the Apptainer
definitions through ``all``; from-docker.def copies a built image). That step installs
RUNTIME_PACKAGES, whose openmpi-bin brings them on Debian 12 (the images' base): openmpi-bin ->
libopenmpi3 -> libucx0 -> ibverbs-providers and libibverbs1, all as Depends (apt installs no
Recommends here). The chain is checked against this machine's apt where it is Debian 12 too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import REPO, need

INSTALL = REPO / "docker" / "install.sh"
RDMA_PACKAGES = ("libibverbs1", "ibverbs-providers")
# Debian 12's Depends from the package the recipes name to the RDMA packages (apt-cache depends).
CHAIN = {
    "openmpi-bin": ("libopenmpi3",),
    "libopenmpi3": ("libucx0", "libibverbs1"),
    "libucx0": ("ibverbs-providers", "libibverbs1"),
}


def runtime_packages() -> list[str]:
    found = re.search(r"^RUNTIME_PACKAGES=\(([^)]*)\)", INSTALL.read_text(), re.MULTILINE)
    assert found, "docker/install.sh has no RUNTIME_PACKAGES=(...) line"
    return found.group(1).split()


def test_every_recipe_runs_the_system_step() -> None:
    dockerfile = re.sub(r"\\\n", " ", (REPO / "Dockerfile.gpu").read_text())
    assert re.search(r"^RUN .*/opt/ctrain/install\.sh system$", dockerfile, re.MULTILINE)
    for name in ("ctrain-gpu.def", "ctrain-cpu.def"):
        text = (REPO / "definitions" / name).read_text()
        assert re.search(r"^\s+/opt/ctrain/install\.sh all$", text, re.MULTILINE), name
    install = INSTALL.read_text()
    assert re.search(r"all\) cmd_system && ", install)
    assert 'apt_install "${RUNTIME_PACKAGES[@]}"' in install


def test_the_system_step_gets_the_rdma_packages() -> None:
    """Named, or reached from a named package through Depends alone."""
    named = runtime_packages()
    assert "openmpi-bin" in named  # Open MPI, built with UCX on Debian 12
    reached = set(named)
    for _ in CHAIN:
        reached |= {dep for pkg in list(reached) for dep in CHAIN.get(pkg, ())}
    assert {"libucx0", *RDMA_PACKAGES} <= reached


def _debian_major(root: Path = Path("/")) -> str:
    try:
        return (root / "etc" / "debian_version").read_text().strip().split(".")[0]
    except OSError:
        return ""


@pytest.mark.parametrize("package", sorted(CHAIN))
def test_the_chain_is_debian_12s(package: str) -> None:
    debian12 = shutil.which("apt-cache") is not None and _debian_major() == "12"
    need(debian12, "the chain is checked where apt is Debian 12's, the images' base")
    done = subprocess.run(
        ["apt-cache", "depends", "--no-recommends", "--no-suggests", package],
        capture_output=True,
        text=True,
        timeout=60,
    )
    need(done.returncode == 0, f"apt-cache knows no {package} (apt-get update, or make system)")
    depends = set(re.findall(r"^\s+\|?(?:Pre)?Depends: (\S+)", done.stdout, re.MULTILINE))
    assert set(CHAIN[package]) <= depends, done.stdout
