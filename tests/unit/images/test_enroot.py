"""images/stores/enroot.py's pure parts (enroot's URI, argv, the squashfs superblock, the plan,
enroot's paths) and the enroot stand-in's argument and configuration parsing, pinned to enroot's
rules (docs/pyxis-facts.md, "enroot import")."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ctrain.errors import ConfigError
from ctrain.images import cachedir, pull
from ctrain.images.stores import enroot
from ctrain.images.stores.base import PullAsk
from ctrain.names import PYXIS
from tests.support.helpers import need
from tests.support.standin_pyxis import enroot as standin

CACHE = Path("/scratch/me/ctrain")


@pytest.mark.parametrize(
    ("ref", "uri"),
    [
        ("docker://ghcr.io/a/b:1", "docker://ghcr.io#a/b:1"),
        ("docker://127.0.0.1:5000/ctrain:ci-cpu", "docker://127.0.0.1:5000#ctrain:ci-cpu"),
        ("docker://localhost/x/y", "docker://localhost#x/y"),
        ("docker://ubuntu:24.04", "docker://ubuntu:24.04"),  # Docker Hub: no registry part
        ("docker://nvidia/cuda:12", "docker://nvidia/cuda:12"),
        (" nvcr.io#nvidia/pytorch:25.06-py3 ", "docker://nvcr.io#nvidia/pytorch:25.06-py3"),
        ("docker://nvcr.io#nvidia/pytorch:1", "docker://nvcr.io#nvidia/pytorch:1"),
        ("docker-daemon://ctrain:ci", "dockerd://ctrain:ci"),
    ],
)
def test_import_uri(ref: str, uri: str) -> None:
    assert enroot.import_uri(ref) == uri


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        ("", "empty"),
        ("docker://a b", "spaces"),
        ("ubuntu:24.04", "not a registry image"),  # no scheme: a file name for enroot
        ("./image.sqsh", "not a registry image"),
        ("/abs/dir#x", "not a registry image"),
        ("oras://r/x:1", "docker://"),
        ("library://u/c/i", "docker://"),
    ],
)
def test_import_uri_refuses(ref: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        enroot.import_uri(ref)


def test_import_argv_is_enroots_documented_form() -> None:
    argv = enroot.import_argv("/usr/bin/enroot", Path("/c/.x.sqsh.pull-1"), "docker://r#i:1")
    assert argv == ["/usr/bin/enroot", "import", "-o", "/c/.x.sqsh.pull-1", "docker://r#i:1"]
    assert standin.parse_import(argv[2:]) == ("docker://r#i:1", "/c/.x.sqsh.pull-1", "")


def superblock(used: int, major: int = 4, magic: bytes = b"hsqs") -> bytes:
    return enroot.SUPERBLOCK.pack(magic, 7, 0, 131072, 1, 2, 17, 0, 1, major, 0, 96, used)


@pytest.mark.parametrize(
    ("header", "size", "problem"),
    [
        (superblock(4096), 4096, None),
        (superblock(4000), 4096, None),  # padded to a block: bigger than bytes_used is whole
        (superblock(8192), 4096, "truncated"),
        (superblock(4096, magic=b"SIF_"), 4096, "no squashfs magic"),
        (superblock(4096, major=3), 4096, "version 3.0"),
        (b"hsqs", 4, "shorter than a squashfs superblock"),
    ],
)
def test_squashfs_problem(header: bytes, size: int, problem: str | None) -> None:
    found = enroot.squashfs_problem(header, size)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_superblock_of_a_real_mksquashfs_file(tmp_path: Path) -> None:
    need(shutil.which("mksquashfs") is not None, "mksquashfs missing (squashfs-tools)")
    (tmp_path / "root" / "etc").mkdir(parents=True)
    image = tmp_path / "x.sqsh"
    subprocess.run(
        ["mksquashfs", str(tmp_path / "root"), str(image), "-quiet", "-noappend"],
        check=True,
        timeout=60,
    )
    state = enroot.squashfs_state(image)
    assert state.exists and state.problem is None and state.size == image.stat().st_size
    used = enroot.SUPERBLOCK.unpack_from(image.read_bytes())[-1]
    image.write_bytes(image.read_bytes()[: used - 1])  # cut short
    assert "truncated" in str(enroot.squashfs_state(image).problem)
    assert not enroot.squashfs_state(tmp_path / "none").exists


def test_plan_puts_the_file_in_the_cache() -> None:
    plan = pull.plan(
        PullAsk(ref="docker://ghcr.io/a/b:1", runtime=PYXIS, program="srun", cache_root=CACHE)
    )
    target = CACHE / "images" / "docker_ghcr.io_a_b_1.sqsh"
    assert (plan.ref, plan.runtime, plan.program) == ("docker://ghcr.io#a/b:1", PYXIS, "enroot")
    assert (plan.target, plan.record, plan.lock) == (
        target,
        target.with_name(target.name + ".json"),
        target.with_name(target.name + ".lock"),
    )
    assert plan.owned


def test_plan_refuses_output() -> None:
    with pytest.raises(ConfigError, match="-o/--output is not supported"):
        pull.plan(
            PullAsk(
                ref="docker://a.b/c:1",
                runtime="pyxis",
                program="enroot",
                output="/tmp/x.sqsh",
                cache_root=CACHE,
            )
        )


def test_enroot_paths_are_in_the_cache_and_the_node_tmp() -> None:
    choice = cachedir.CacheChoice(CACHE, "flag", False)
    assert cachedir.enroot_env(choice, Path("/tmp/job7")) == {
        "ENROOT_CACHE_PATH": f"{CACHE}/enroot/cache",
        "ENROOT_DATA_PATH": f"{CACHE}/enroot/data",
        "ENROOT_RUNTIME_PATH": f"{CACHE}/enroot/runtime",
        "ENROOT_TEMP_PATH": "/tmp/job7",
    }


# -- the stand-in, pinned to enroot::import and enroot.in ----------------------------------------


@pytest.mark.parametrize(
    ("args", "parsed"),
    [
        (["docker://r#i"], ("docker://r#i", "", "")),
        (["-o", "f.sqsh", "-a", "arm64", "docker://r#i"], ("docker://r#i", "f.sqsh", "arm64")),
        (["--output=f", "--arch=amd64", "--", "docker://r#i"], ("docker://r#i", "f", "amd64")),
    ],
)
def test_standin_parses_import(args: list[str], parsed: tuple[str, str, str]) -> None:
    assert standin.parse_import(args) == parsed


@pytest.mark.parametrize(
    "args", [[], ["-o"], ["--output=", "u"], ["-x", "u"], ["u", "v"], ["-o", "", "u"]]
)
def test_standin_usage_errors(args: list[str]) -> None:
    with pytest.raises(standin.Failed, match="Usage"):
        standin.parse_import(args)


def test_standin_settings_default_to_home_and_no_means_unset() -> None:
    found = standin.settings({"HOME": "/h", "TMPDIR": "/t", "ENROOT_ALLOW_HTTP": "no"})
    assert found["ENROOT_CACHE_PATH"] == "/h/.cache/enroot"
    assert found["ENROOT_DATA_PATH"] == "/h/.local/share/enroot"
    assert found["ENROOT_TEMP_PATH"] == "/t"
    assert "ENROOT_ALLOW_HTTP" not in found
    given = standin.settings({"HOME": "/h", "ENROOT_CACHE_PATH": "/c", "ENROOT_ALLOW_HTTP": "y"})
    assert given["ENROOT_CACHE_PATH"] == "/c" and given["ENROOT_ALLOW_HTTP"] == "y"


def test_standin_refuses_an_existing_output(tmp_path: Path) -> None:
    existing = tmp_path / "x.sqsh"
    existing.write_bytes(b"")
    env = {"HOME": str(tmp_path / "home"), "ENROOT_ALLOW_HTTP": "y"}
    with pytest.raises(standin.Failed, match=f"File already exists: {existing}"):
        standin.import_image(["-o", str(existing), "docker://127.0.0.1:1#i:1"], env)
