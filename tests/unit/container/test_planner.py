"""The planner's Invocation is complete: what --dry-run prints is what the exec gets, the
Apptainer cache variables included, decided in planning (nothing created there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.container import planner
from ctrain.errors import ConfigError
from ctrain.settings import Resolved, Value, resolve


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    """A PATH with an apptainer that only tells its version, a HOME, and no cache configured."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text("#!/bin/sh\necho 'apptainer version 1.4.5'\n")
    (bin_dir / "apptainer").chmod(0o755)
    return {
        "PATH": str(bin_dir),
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
    }


def settings(environ: dict[str, str], cwd: Path, **flags: Value) -> dict[str, Resolved]:
    return resolve({"runtime": "apptainer", **flags}, environ, cwd)


def test_a_remote_image_carries_its_cache_variables(
    environ: dict[str, str], tmp_path: Path
) -> None:
    cache = tmp_path / "scratch" / "cache"
    (tmp_path / "ctrain.toml").write_text(f'cache_dir = "{cache}"\n')
    s = settings(environ, tmp_path)
    got = planner.plan("exec", "docker://example/img:1", ("true",), (), (), s, environ)
    expected = {
        "APPTAINER_CACHEDIR": str(cache),
        "APPTAINER_TMPDIR": str(cache / "tmp"),
        "SINGULARITY_CACHEDIR": str(cache),
        "SINGULARITY_TMPDIR": str(cache / "tmp"),
    }
    assert got.runtime_env == expected
    assert {key: got.env[key] for key in expected} == expected  # what is exec'd
    assert got.cache is not None
    assert got.cache.source == f"file {tmp_path / 'ctrain.toml'}:1"
    assert not cache.exists()  # created by run, just before the exec


def test_a_local_image_needs_no_cache(environ: dict[str, str], tmp_path: Path) -> None:
    image = tmp_path / "img.sif"
    image.write_bytes(b"")
    s = settings(environ, tmp_path)  # no cache anywhere, $HOME not allowed: not needed either
    got = planner.plan("exec", str(image), ("true",), (), (), s, environ)
    assert got.runtime_env == {} and got.cache is None
    assert not any(key.endswith(("_CACHEDIR", "_TMPDIR")) for key in got.env)


def test_no_cache_directory_fails_the_plan(environ: dict[str, str], tmp_path: Path) -> None:
    s = settings(environ, tmp_path)
    with pytest.raises(ConfigError, match="no directory for the Apptainer cache"):
        planner.plan("exec", "docker://example/img:1", ("true",), (), (), s, environ)
    s = settings(environ, tmp_path, allow_home_cache=True)
    got = planner.plan("exec", "docker://example/img:1", ("true",), (), (), s, environ)
    assert got.runtime_env["APPTAINER_CACHEDIR"] == str(tmp_path / "home/.apptainer/cache")
