"""`ctrain build` with the stand-in apptainer: argv, cache placement, and a target that appears
whole or not at all. (A real docker build is in tests/integration/test_build_docker.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ctrain.errors import SpecError
from ctrain.images.build import (
    BuildRequest,
    check_request,
    default_target,
    engine_build_argv,
    sif_build_argv,
)
from tests import fake_apptainer
from tests.helpers import run_ctrain, sandbox


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    box = sandbox(
        tmp_path,
        FAKE_APPTAINER_LOG=str(tmp_path / "calls.jsonl"),
        CTRAIN_CACHE_DIR=str(tmp_path / "cache"),
        CTRAIN_MIN_FREE_GB="1",
    )
    fake_apptainer.install(box.bin)
    (tmp_path / "ctrain.def").write_text(
        "Bootstrap: docker-daemon\nFrom: ctrain:{{ V }}\n\n%arguments\n    V=0.1.0\n"
    )
    return box.env


def ctrain(
    tmp: Path, env: dict[str, str], *args: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    return run_ctrain("build", *args, env={**env, **extra}, cwd=tmp)


def test_argv() -> None:
    sif = BuildRequest("apptainer", "/bin/apptainer", "a.def", "/x/a.sif", ("V=1",), fakeroot=True)
    assert sif_build_argv(sif, Path("/x/.a.sif.build-1")) == [
        "/bin/apptainer",
        "build",
        "--fakeroot",
        "--build-arg",
        "V=1",
        "/x/.a.sif.build-1",
        "a.def",
    ]
    engine = BuildRequest("docker", "/bin/docker", "/r/Dockerfile.gpu", "ctrain:1", ("B=x y",))
    assert engine_build_argv(engine) == [
        "/bin/docker",
        "build",
        "--network",
        "host",
        "-f",
        "/r/Dockerfile.gpu",
        "-t",
        "ctrain:1",
        "--build-arg",
        "B=x y",
        "/r",
    ]
    assert default_target("definitions/ctrain-gpu.def", "apptainer") == "ctrain-gpu.sif"
    assert default_target("docker://debian:12", "apptainer") == "debian.sif"


def test_build_lands_whole_with_the_cache_out_of_home(tmp_path: Path, env: dict[str, str]) -> None:
    done = ctrain(tmp_path, env, "ctrain.def", "-o", "out.sif", "--build-arg", "V=2")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.sif").read_bytes()[32:41] == b"SIF_MAGIC"
    assert [p.name for p in tmp_path.glob(".out.sif.build-*")] == []
    (call,) = fake_apptainer.calls(tmp_path / "calls.jsonl")
    assert call["argv"][:3] == ["build", "--build-arg", "V=2"]  # type: ignore[index]
    assert call["env"]["APPTAINER_CACHEDIR"] == str(tmp_path / "cache")  # type: ignore[index]
    assert "Build complete" in done.stderr
    assert done.stdout == "built out.sif\n"  # the result on stdout, like pull and overlay create


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"FAKE_APPTAINER_FAIL": "build"}, "build exited 255"),
        ({"FAKE_APPTAINER_BAD": "1"}, "not usable"),
    ],
)
def test_a_failed_build_leaves_nothing(
    tmp_path: Path, env: dict[str, str], extra: dict[str, str], words: str
) -> None:
    (tmp_path / "out.sif").write_bytes(b"previous")
    done = ctrain(tmp_path, env, "ctrain.def", "-o", "out.sif", "--force", **extra)
    assert done.returncode != 0
    assert words in done.stderr.splitlines()[-1] and "Traceback" not in done.stderr
    assert (tmp_path / "out.sif").read_bytes() == b"previous"
    assert [p.name for p in tmp_path.glob(".out.sif.build-*")] == []


def test_refusals_write_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "out.sif").write_bytes(b"previous")
    for args, words in [
        (("ctrain.def", "-o", "out.sif"), "exists"),
        (("missing.def",), "does not exist"),
        (("ctrain.def", "--build-arg", "novalue"), "NAME=VALUE"),
        (("ctrain.def", "-o", "nodir/x.sif"), "does not exist"),
    ]:
        done = ctrain(tmp_path, env, *args)
        assert done.returncode != 0
        assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert (tmp_path / "out.sif").read_bytes() == b"previous"
    assert fake_apptainer.calls(tmp_path / "calls.jsonl") == []


def test_engine_builds_tags_not_files() -> None:
    with pytest.raises(SpecError, match="image tag"):
        check_request(BuildRequest("docker", "docker", __file__, "out.sif"))
