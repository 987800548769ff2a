"""`ctrain build` with the real Docker engine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.helpers import CTRAIN

from .images import base_image
from .jobs import clean_env


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
    word = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", tag, "cat", "/word"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert word.stdout.strip() == "built"
    subprocess.run(["docker", "rmi", tag], capture_output=True, timeout=120)
