"""The MPI check on the real launchers: `srun --mpi=pmix` (Slurm's PMIx server, Debian 12's
PMIx 4.2.2) into the CPU image on Docker and on Apptainer, and into this venv, each rank's
`ctrain launch --mode horovod --explain --json` says the two sides match.

Inside the images the checkout's ctrain runs (bound at /ctrain-src, first on PYTHONPATH), so
the images need no rebuild for a change to the check; what it reads there is the image's own
dpkg database, as an image's ctrain does. $CTRAIN_TEST_CPU_IMAGE / $CTRAIN_TEST_CPU_SIF name an
image or SIF built before instead of building them here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import CTRAIN, SRC
from tests.support.images import BUILD_TIMEOUT, ci_cpu_image, ci_cpu_sif
from tests.support.real_runs import clean_env, run

pytestmark = [pytest.mark.slurm, pytest.mark.horovod, pytest.mark.builds("cpu-image", "cpu-sif")]

SRUN = ["srun", "--mpi=pmix", "-n", "2", "-t", "5", "--kill-on-bad-exit=1"]
EXPLAIN = ["launch", "--mode", "horovod", "--explain", "--json"]
INSIDE = ["env", "PYTHONPATH=/ctrain-src", "python", "-m", "ctrain", *EXPLAIN]
STEP_TIMEOUT = 300  # two ranks starting a container each on the 2 shared cores


def checks(tmp_path: Path, argv: list[str]) -> list[dict[str, Any]]:
    """Each rank's ``mpi_check`` from ``argv`` run under srun --mpi=pmix, by rank."""
    output = ["--output", f"{tmp_path}/plan-%t.json"]
    run([*SRUN, *output, *argv], clean_env(), timeout=STEP_TIMEOUT, cwd=tmp_path)
    plans = [json.loads((tmp_path / f"plan-{t}.json").read_text()) for t in (0, 1)]
    assert [p["rank"] for p in plans] == [0, 1]
    return [p["mpi_check"] for p in plans]


def matched(found: dict[str, Any]) -> bool:
    message = str(found["message"])
    return (
        found["status"] == "proceed"
        and found["checked"] is True
        and message.startswith("Slurm's PMIx server (srun --mpi=pmix), PMIx 4.2.2")
        and message.endswith(
            "and the image's PMIx 4.2.2: one release series, via PMIX_SERVER_URI41"
        )
    )


@pytest.mark.timeout(2 * STEP_TIMEOUT)
def test_srun_pmix_into_this_venv_matches(tmp_path: Path) -> None:
    found = checks(tmp_path, [CTRAIN, *EXPLAIN])
    assert all(matched(f) for f in found), found


@pytest.mark.docker
@pytest.mark.timeout(BUILD_TIMEOUT + 2 * STEP_TIMEOUT)  # the image is built first if need be
def test_srun_pmix_into_the_cpu_image_on_docker_matches(tmp_path: Path) -> None:
    image = ci_cpu_image()
    argv = [CTRAIN, "exec", "--runtime", "docker", "--no-launch", "-B", f"{SRC}:/ctrain-src:ro"]
    found = checks(tmp_path, [*argv, image, "--", *INSIDE])
    assert all(matched(f) for f in found), found


@pytest.mark.apptainer
@pytest.mark.timeout(BUILD_TIMEOUT + 2 * STEP_TIMEOUT)
def test_srun_pmix_into_the_cpu_sif_on_apptainer_matches(tmp_path: Path) -> None:
    sif = os.environ.get("CTRAIN_TEST_CPU_SIF") or str(ci_cpu_sif().path)
    argv = [CTRAIN, "exec", "--runtime", "apptainer", "--no-launch", "-B", f"{SRC}:/ctrain-src:ro"]
    found = checks(tmp_path, [*argv, sif, "--", *INSIDE])
    assert all(matched(f) for f in found), found
