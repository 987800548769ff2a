"""The default image, which no registry holds until a release publishes it: ``ctrain pull`` and
``ctrain exec`` of it end in one line saying so, with how to build or push it; another image's
failed pull keeps its own message. Against the stand-in apptainer
(tests/support/fake_apptainer.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ctrain import __version__
from ctrain.errors import CtrainError, PullError
from ctrain.images import pull
from ctrain.images.stores.base import PullAsk
from ctrain.names import CHARLIECLOUD, ENGINE_RUNTIMES, PYXIS, SIF_RUNTIMES
from tests.support import fake_apptainer
from tests.support.helpers import run_ctrain

DEFAULT = "docker://ghcr.io/ctrain/ctrain:0.1.0-gpu"
OTHER = "docker://registry.example/team/train:1"
TIMEOUT = 60
# The registry says no (the stand-in's failing pull: "manifest unknown"), or cannot be reached.
FAILURES = [{"FAKE_APPTAINER_FAIL": "pull"}, {"FAKE_APPTAINER_OFFLINE": "1"}]
HEAD = f"ctrain: error: the default image {DEFAULT} is not published (yet)"
FIX = (
    "Fix: build it here with `make image` (or `make image-cpu`) in a checkout of ctrain and "
    "set CTRAIN_IMAGE=... to what it built"
)
PUSH = "or push it to your site's registry with `make push REGISTRY=...` and pull that"


def run(tmp: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    box = fake_apptainer.with_standin(
        tmp,
        USER="tester",
        CTRAIN_CACHE_DIR=str(tmp / "cache"),
        CTRAIN_MIN_FREE_GB="1",
        CTRAIN_RUNTIME="apptainer",
    )
    return run_ctrain(*args, env=box.with_env(**extra), cwd=tmp, timeout=TIMEOUT)


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one ``ctrain: error:`` line, the last of stderr (apptainer's own output before)."""
    lines = done.stderr.strip().splitlines()
    assert [line for line in lines if line.startswith("ctrain: error:")] == lines[-1:], lines
    return lines[-1]


def test_the_settings_default_is_the_image_the_release_publishes() -> None:
    assert pull.default_image() == DEFAULT
    assert DEFAULT.endswith(f":{__version__}-gpu")  # the release workflow's GPU tag


@pytest.mark.parametrize("failure", FAILURES)
@pytest.mark.parametrize(
    "args",
    [
        ("pull",),  # the `image` setting's default
        ("pull", DEFAULT),  # the same image, named
        ("exec", "--no-launch", "--", "true"),  # exec pulls the default first
    ],
)
def test_the_unpublished_default_ends_in_one_line_with_the_fix(
    tmp_path: Path, args: tuple[str, ...], failure: dict[str, str]
) -> None:
    done = run(tmp_path, *args, **failure)
    assert done.returncode == PullError.exit_code == 5
    line = error_line(done)
    assert line.startswith(HEAD) and FIX in line and PUSH in line, line
    assert f"build/ctrain-{__version__}.sif" in line
    assert "apptainer pull" in line  # the tool's reason stays in the message
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "cache" / "images").exists() or not any(
        p.suffix == ".sif" for p in (tmp_path / "cache" / "images").iterdir()
    )


@pytest.mark.parametrize("failure", FAILURES)
def test_another_images_failed_pull_keeps_its_own_message(
    tmp_path: Path, failure: dict[str, str]
) -> None:
    done = run(tmp_path, "pull", OTHER, **failure)
    assert done.returncode == 5
    line = error_line(done)
    assert line.startswith(f"ctrain: error: apptainer pull {OTHER} failed: "), line
    assert "default image" not in line and "make image" not in line
    assert "Fix: check the reference, the network and the registry login" in line


def test_a_set_image_that_fails_keeps_its_own_message(tmp_path: Path) -> None:
    done = run(tmp_path, "pull", CTRAIN_IMAGE=OTHER, FAKE_APPTAINER_FAIL="pull")
    assert done.returncode == 5 and "default image" not in error_line(done)


@pytest.mark.parametrize("runtime", [*SIF_RUNTIMES, *ENGINE_RUNTIMES, PYXIS, CHARLIECLOUD], ids=str)
def test_is_default_compares_the_reference_as_each_store_takes_it(
    tmp_path: Path, runtime: str
) -> None:
    def planned(ref: str) -> bool:
        ask = PullAsk(ref=ref, runtime=runtime, program=runtime, cache_root=tmp_path)
        return pull.is_default(pull.plan(ask))

    assert planned(DEFAULT)
    assert not planned(OTHER)
    assert not planned("docker://ghcr.io/ctrain/ctrain:0.1.0-cpu")


def test_the_message_names_the_cause_and_both_ways() -> None:
    cause = CtrainError("apptainer pull x failed: manifest unknown", "check it")
    error = PullError.unpublished(DEFAULT, cause)
    assert isinstance(error, PullError) and error.exit_code == 5
    line = error.line()
    assert "\n" not in line and "(apptainer pull x failed: manifest unknown)" in line
    assert line.startswith(HEAD) and FIX in line and PUSH in line
