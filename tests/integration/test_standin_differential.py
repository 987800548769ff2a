"""The Apptainer stand-in (tests/fake_apptainer.py) against the real Apptainer on what ctrain's
unit tests lean on it for beyond exec (test_golden_oracles.py has the exec argvs): pull, build
and overlay create. Each case runs the same command line through both, each in a directory of
its own, and asserts the same outcome: the exit status, and the files it leaves.

The stand-in stays for what the real binary cannot show here (SingularityCE, other Apptainer
releases, a version without --no-eval); where the two differ, the real one is right and the
stand-in is corrected.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import fake_apptainer
from tests.helpers import REGISTRY, need, registry_up

from .images import busybox_base

pytestmark = [pytest.mark.apptainer, pytest.mark.docker, pytest.mark.timeout(600)]
TIMEOUT = 120
DEF = """Bootstrap: localimage
From: BASE

%arguments
    WHO=default

%labels
    ctrain.test.who {{ WHO }}
"""

# name: (argv with {dir} and {ref} filled in, the files in {dir} after it)
CASES: dict[str, tuple[str, str]] = {
    "pull over plain http without --no-https": ("pull --disable-cache {dir}/a.sif {ref}", ""),
    "pull --no-https": ("pull --disable-cache --no-https {dir}/a.sif {ref}", "a.sif"),
    "pull onto an existing file": ("pull --disable-cache --no-https {dir}/a.sif {ref}", "a.sif"),
    "pull --force": ("pull --disable-cache --no-https --force {dir}/a.sif {ref}", "a.sif"),
    "pull docker-daemon://": ("pull --disable-cache {dir}/d.sif docker-daemon://x:1", "a.sif"),
    "pull with three arguments": ("pull {dir}/e.sif {ref} extra", "a.sif"),
    "pull with an unknown flag": ("pull --bogus {dir}/e.sif {ref}", "a.sif"),
    "build from a definition": ("build --build-arg WHO=me {dir}/b.sif {dir}/t.def", "a.sif b.sif"),
    "build with an unused build arg": (
        "build --force --build-arg WHO=me --build-arg OTHER=1 {dir}/b.sif {dir}/t.def",
        "a.sif b.sif",
    ),
    "build onto an existing file": ("build {dir}/b.sif {dir}/t.def", "a.sif b.sif"),
    "build with one argument": ("build {dir}/t.def", "a.sif b.sif"),
    "overlay create": ("overlay create --size 64 {dir}/o.img", "a.sif b.sif o.img"),
    "overlay create onto an existing file": (
        "overlay create --size 64 {dir}/o.img",
        "a.sif b.sif o.img",
    ),
    "overlay create with a unit": ("overlay create --size 64M {dir}/p.img", "a.sif b.sif o.img"),
    "overlay create too small": ("overlay create --size 32 {dir}/q.img", "a.sif b.sif o.img"),
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str]]:
    """(the real binary's directory, the stand-in's, busybox's reference in the local
    registry); the cases run in order, each on what the ones before left."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    ref = f"{REGISTRY}/ctrain-test/standin-busybox:{os.getpid()}-{time.monotonic_ns()}"
    for argv in (["docker", "tag", busybox_base(), ref], ["docker", "push", ref]):
        subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=True)
    root = tmp_path_factory.mktemp("differential")
    real, standin = root / "real", root / "standin"
    for directory in (real, standin):
        directory.mkdir()
        (directory / "t.def").write_text(DEF.replace("BASE", str(directory / "a.sif")))
    fake_apptainer.install(root / "bin")
    yield real, standin, f"docker://{ref}"


def outcome(program: str, line: str, directory: Path, ref: str) -> tuple[int, list[str], str]:
    argv = [program, *line.format(dir=directory, ref=ref).split()]
    env = {**os.environ, "APPTAINER_CACHEDIR": str(directory.parent / "cache")}
    done = subprocess.run(
        argv, env=env, cwd=directory, capture_output=True, text=True, timeout=TIMEOUT
    )
    return done.returncode, sorted(p.name for p in directory.iterdir()), done.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_the_standin_does_what_apptainer_does(case: str, dirs: tuple[Path, Path, str]) -> None:
    real_dir, standin_dir, ref = dirs
    line, left = CASES[case]
    real = outcome("apptainer", line, real_dir, ref)
    standin = outcome(str(standin_dir.parent / "bin" / "apptainer"), line, standin_dir, ref)
    assert real[1] == sorted([*left.split(), "t.def"]), real[2]
    assert standin[:2] == real[:2], f"real: {real[2]}\nstand-in: {standin[2]}"
