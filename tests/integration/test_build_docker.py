"""`ctrain build` with the real Docker engine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN
from tests.support.images import base_image
from tests.support.real_runs import clean_env


@pytest.mark.docker
def test_docker_build_from_a_dockerfile(tmp_path: Path) -> None:
    recipe = tmp_path / "Dockerfile"
    recipe.write_text("ARG BASE\nFROM ${BASE}\nARG WORD\nRUN echo $WORD > /word\n")
    tag = "ctrain-build-test:1"
    done = subprocess.run(
        [
            CTRAIN,
            "build",
            "--runtime",
            "docker",
            str(recipe),
            "-o",
            tag,
            "--build-arg",
            f"BASE={base_image()}",
            "--build-arg",
            "WORD=built",
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    # no terminal: one line per step (docker's own output only if the build fails)
    assert done.stderr.splitlines() == [
        "build: step 1/4: ARG BASE",
        "build: step 2/4: FROM ${BASE}",
        "build: step 3/4: ARG WORD",
        "build: step 4/4: RUN echo $WORD > /word",
    ]
    word = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", tag, "cat", "/word"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert word.stdout.strip() == "built"
    subprocess.run(["docker", "rmi", tag], capture_output=True, timeout=120)


@pytest.mark.docker
def test_a_failed_docker_build_shows_the_end_of_its_output(tmp_path: Path) -> None:
    recipe = tmp_path / "Dockerfile"
    recipe.write_text(f"FROM {base_image()}\nRUN echo the-last-words && exit 3\n")
    done = subprocess.run(
        [CTRAIN, "build", "--runtime", "docker", str(recipe), "-o", "ctrain-build-fails:1"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 5
    assert "the-last-words" in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "ctrain: error: docker build exited 3 Fix: read the build output above"
    )
