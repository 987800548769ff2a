"""`ctrain build` with the stand-in apptainer: argv, cache and temporary space, the checks
made before apptainer runs (--build-arg support by version, unused --build-arg), and a target
that appears whole or not at all. (A real docker build: tests/integration/test_build_docker.py.)"""

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
    recipe_arguments,
    sif_build_argv,
)
from tests.support import fake_apptainer
from tests.support.helpers import run_ctrain


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    box = fake_apptainer.with_standin(
        tmp_path,
        CTRAIN_CACHE_DIR=str(tmp_path / "cache"),
        CTRAIN_MIN_FREE_GB="1",
        TMPDIR=str(tmp_path / "node-tmp"),
    )
    (tmp_path / "node-tmp").mkdir()
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
    version, call = fake_apptainer.calls(tmp_path / "calls.jsonl")
    assert version["argv"] == ["--version"]  # --build-arg: checked that this release has it
    assert call["argv"][:3] == ["build", "--build-arg", "V=2"]  # type: ignore[index]
    assert call["env"]["APPTAINER_CACHEDIR"] == str(tmp_path / "cache")  # type: ignore[index]
    # apptainer's build-temp-* on the node, not in the cache: in a directory of ctrain's own there,
    # removed when the build ends
    node_tmp = tmp_path / "node-tmp"
    scratch = Path(call["env"]["APPTAINER_TMPDIR"])  # type: ignore[index]
    assert scratch.parent == node_tmp and scratch.name.startswith("ctrain-apptainer-")
    assert call["env"]["SINGULARITY_TMPDIR"] == str(scratch)  # type: ignore[index]
    assert list(node_tmp.iterdir()) == []
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


def test_recipe_arguments_skip_comment_lines() -> None:
    text = "From: x:{{ A }}\n# {{ B }}\n%post\n  echo {{C}}\n  %arguments\n"
    assert recipe_arguments(text) == ({"A", "C"}, True)
    assert recipe_arguments("From: x\n#%arguments\n") == (set(), False)


OLD_APPTAINER = """#!/bin/sh
# An Apptainer release before --build-arg (1.2): it would reject the flag after a long start.
if [ "$1" = --version ]; then echo "$VERSION_LINE"; exit 0; fi
echo "$*" >> "$CALLED"
exit 255
"""


@pytest.mark.parametrize(
    ("line", "refused"),
    [
        ("apptainer version 1.1.9", True),
        ("singularity-ce version 3.11.5", True),
        ("singularity version 3.8.7", True),
        ("apptainer version 1.2.0", False),
        ("singularity-ce version 4.0.0", False),
    ],
)
def test_build_args_need_a_release_that_has_them(
    tmp_path: Path, env: dict[str, str], line: str, refused: bool
) -> None:
    program = tmp_path / "bin" / "apptainer"
    program.write_text(OLD_APPTAINER)
    program.chmod(0o755)
    called = tmp_path / "called"
    done = ctrain(
        tmp_path, env, "ctrain.def", "-o", "out.sif", VERSION_LINE=line, CALLED=str(called)
    )
    if refused:  # %arguments alone needs the release too
        assert done.returncode == 2 and not called.exists()
        assert done.stderr.strip() == (
            f"ctrain: error: {line} has no --build-arg or %arguments (needs Apptainer >= 1.2 "
            "or SingularityCE >= 4.0) Fix: upgrade to Apptainer >= 1.2 or SingularityCE >= 4.0, "
            "or write the values into the definition"
        )
    else:
        assert "build exited 255" in done.stderr and called.exists()


@pytest.mark.parametrize(
    ("name", "version", "refused"),
    [
        ("apptainer", "1.1.9", True),
        ("apptainer", "1.2.0", False),
        ("singularity", "3.11.5", True),
        ("singularity", "4.0.0", False),
    ],
)
def test_the_stand_in_release_decides_build_args(
    tmp_path: Path, env: dict[str, str], name: str, version: str, refused: bool
) -> None:
    fake_apptainer.install(tmp_path / "bin", name)
    done = ctrain(
        tmp_path, env, "ctrain.def", "-o", "out.sif", "--build-arg", "V=2",
        "--runtime", name, FAKE_APPTAINER_VERSION=version,
    )  # fmt: skip
    builds = [
        c for c in fake_apptainer.calls(tmp_path / "calls.jsonl") if "build" in c.get("argv", [])
    ]
    if refused:
        assert done.returncode == 2 and "has no --build-arg or %arguments" in done.stderr
        assert builds == []
    else:
        assert done.returncode == 0, done.stderr
        assert len(builds) == 1


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("ctrain.def", "--build-arg", "V=1", "--build-arg", "X=2"), "--build-arg X not used by"),
        (("docker://debian:12", "--build-arg", "V=1"), "--build-arg V not used by a remote source"),
    ],
)
def test_an_unused_build_arg_is_refused_before_apptainer_runs(
    tmp_path: Path, env: dict[str, str], args: tuple[str, ...], words: str
) -> None:
    done = ctrain(tmp_path, env, *args, "-o", "out.sif")
    assert done.returncode == 2
    assert words in done.stderr and done.stderr.count("\n") == 1
    assert fake_apptainer.calls(tmp_path / "calls.jsonl") == []


def test_tmpdir_setting_and_its_check(tmp_path: Path, env: dict[str, str]) -> None:
    chosen = tmp_path / "local"
    chosen.mkdir()
    done = ctrain(tmp_path, env, "docker://debian:12", "-o", "a.sif", "--tmpdir", str(chosen))
    assert done.returncode == 0, done.stderr
    done = ctrain(
        tmp_path, env, "docker://debian:12", "-o", "b.sif", CTRAIN_BUILD_TMPDIR=str(chosen)
    )
    assert done.returncode == 0, done.stderr
    calls = [c for c in fake_apptainer.calls(tmp_path / "calls.jsonl") if "argv" in c]
    used = [Path(c["env"]["APPTAINER_TMPDIR"]).parent for c in calls]  # type: ignore[index]
    assert used == [chosen] * 2
    done = ctrain(tmp_path, env, "docker://debian:12", "-o", "c.sif", "--tmpdir", "/nonexistent")
    assert done.returncode == 2
    assert "temporary directory /nonexistent does not exist" in done.stderr
    assert "--tmpdir (CTRAIN_BUILD_TMPDIR)" in done.stderr


FAKE_ENGINE = """#!/bin/sh
echo "Sending build context to Docker daemon  2.048kB"
echo "Step 1/2 : FROM base:1"
echo " ---> 1a2b3c"
echo "Step 2/2 : RUN make"
echo "the build's own words"
exit "${FAKE_EXIT:-0}"
"""


@pytest.mark.parametrize(
    ("progress", "code", "expected"),
    [
        ("auto", 0, ["build: step 1/2: FROM base:1", "build: step 2/2: RUN make"]),
        ("off", 0, []),
        ("lines", 4, ["build: step 1/2: FROM base:1", "build: step 2/2: RUN make"]),
    ],
)
def test_engine_build_progress_without_a_terminal(
    tmp_path: Path, env: dict[str, str], progress: str, code: int, expected: list[str]
) -> None:
    """One line per step into a pipe; the output's end only when the build fails."""
    program = tmp_path / "bin" / "docker"
    program.write_text(FAKE_ENGINE)
    program.chmod(0o755)
    (tmp_path / "Dockerfile").write_text("FROM base:1\n")
    done = ctrain(
        tmp_path,
        env,
        "--runtime",
        "docker",
        "Dockerfile",
        "-o",
        "x:1",
        CTRAIN_PROGRESS=progress,
        FAKE_EXIT=str(code),
    )
    lines = done.stderr.splitlines()
    if code == 0:
        assert done.returncode == 0 and lines == expected, done.stderr
        return
    assert done.returncode == 5
    assert lines[:2] == expected
    assert lines[2:-1] == [
        "Sending build context to Docker daemon  2.048kB",
        "Step 1/2 : FROM base:1",
        " ---> 1a2b3c",
        "Step 2/2 : RUN make",
        "the build's own words",
    ]
    assert lines[-1] == "ctrain: error: docker build exited 4 Fix: read the build output above"
