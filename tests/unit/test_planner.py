"""The planner's plan is complete: what --dry-run prints is what the exec gets, a remote image
replaced by the local file ctrain's pull writes, decided in planning (nothing created there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain import planner
from ctrain.errors import ConfigError
from ctrain.images.record import new_sidecar, sidecar_of
from ctrain.images.resolve import ImageChoice
from ctrain.settings import resolve
from ctrain.settings_table import Settings, Value
from tests.support import fake_apptainer

REF = "docker://example/img:1"


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


def settings(environ: dict[str, str], cwd: Path, **flags: Value) -> Settings:
    return resolve({"runtime": "apptainer", **flags}, environ, cwd)


def plan_exec(image: str, s: Settings, environ: dict[str, str]) -> planner.Planned:
    return planner.plan(
        "exec",
        image=image,
        command=("true",),
        bind_flags=(),
        env_pairs=(),
        settings=s,
        environ=environ,
    )


def test_a_remote_image_not_pulled_yet_plans_its_pull(
    environ: dict[str, str], tmp_path: Path
) -> None:
    cache = tmp_path / "scratch" / "cache"
    (tmp_path / "ctrain.toml").write_text(f'cache_dir = "{cache}"\n')
    s = settings(environ, tmp_path)
    got = plan_exec(REF, s, environ)
    target = cache / "images" / "docker_example_img_1.sif"
    assert got.image.image == str(target)  # what the exec runs, planned again after the pull
    assert got.image.pull is not None and got.image.pull.target == target
    assert got.image.cache is not None
    assert got.image.cache.source == f"file {tmp_path / 'ctrain.toml'}:1"
    assert not cache.exists()  # created by run, just before the pull


def test_a_pulled_remote_image_runs_from_its_file(environ: dict[str, str], tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    s = settings(environ, tmp_path, cache_dir=str(cache))
    target = cache / "images" / "docker_example_img_1.sif"
    target.parent.mkdir(parents=True)
    fake_apptainer.make_sif(target, {})
    record = new_sidecar("docker://example/img:1", "apptainer", None, size=target.stat().st_size)
    sidecar_of(target).write_text(record.to_json())
    got = plan_exec(REF, s, environ)
    assert got.image == ImageChoice(image=str(target), cache=got.image.cache)
    assert got.invocation.spec.image == str(target)
    assert "docker://example/img:1" not in got.invocation.argv  # apptainer never sees it


def test_after_the_pull_the_request_is_planned_again_on_the_file(
    environ: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    s = settings(environ, tmp_path, cache_dir=str(cache))
    target = cache / "images" / "docker_example_img_1.sif"

    def fetch(choice: ImageChoice, *_: object) -> None:  # the pull, as ctrain pull leaves it
        target.parent.mkdir(parents=True)
        fake_apptainer.make_sif(target, {})
        record = new_sidecar(REF, "apptainer", None, size=target.stat().st_size)
        sidecar_of(target).write_text(record.to_json())

    monkeypatch.setattr("ctrain.images.resolve.fetch", fetch)
    pending = plan_exec(REF, s, environ)
    assert pending.image.pull is not None and REF in pending.invocation.argv
    got = planner.pulled(pending, s, environ, print)
    assert got == plan_exec(REF, s, environ)  # as if planned after the pull
    assert got.image.pull is None and got.invocation.spec.image == str(target)
    assert planner.pulled(got, s, environ, print) is got  # nothing pending: nothing pulled


def test_a_local_image_needs_no_cache(environ: dict[str, str], tmp_path: Path) -> None:
    image = tmp_path / "img.sif"
    image.write_bytes(b"")
    s = settings(environ, tmp_path)  # no cache anywhere, $HOME not allowed: not needed either
    got = plan_exec(str(image), s, environ)
    assert got.image == ImageChoice(image=str(image))
    assert got.invocation.spec.image == str(image)
    assert not any(key.endswith(("_CACHEDIR", "_TMPDIR")) for key in got.invocation.env)


def test_no_cache_directory_fails_the_plan(environ: dict[str, str], tmp_path: Path) -> None:
    s = settings(environ, tmp_path)
    with pytest.raises(ConfigError, match="no directory for the Apptainer cache"):
        plan_exec(REF, s, environ)
    s = settings(environ, tmp_path, allow_home_cache=True)
    got = plan_exec(REF, s, environ)
    assert got.image.image.startswith(str(tmp_path / "home/.apptainer/cache/images/"))
