"""The Horovod that `make install` puts in the venv is built with ctrain's patch set for the
venv's TensorFlow (patches/horovod-0.28.1/series, docs/horovod-patches.md) and its Keras API
works with tf-keras. `make test-matrix` runs this file on every TensorFlow of the matrix."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import tarfile
from pathlib import Path

import pytest

from ctrain import matrix
from tests.support.helpers import REPO, printed_json
from tests.support.real_runs import BIN, SCRIPTS, clean_env, run

pytestmark = pytest.mark.modes
TF_VERSION = importlib.metadata.version("tensorflow")
PATCHES = REPO / "patches" / f"horovod-{matrix.find(matrix.load(), TF_VERSION).horovod}"
APPLIED = matrix.series((PATCHES / "series").read_text(), TF_VERSION)
EPOCHS = 6  # the change is asked for after epoch 2; the survivor goes on to the end


@pytest.mark.horovod
def test_installed_horovod_has_every_patch_and_tensorflow_mpi_gloo() -> None:
    done = run(
        [
            str(REPO / "scripts" / "check-horovod-build.sh"),
            "--patches",
            str(PATCHES),
            "--allreduce",
            str(BIN / "horovodrun"),
            "TensorFlow",
            "MPI",
            "Gloo",
        ],
        clean_env(),
        timeout=120,
    )
    python = sum(
        1 for name in APPLIED if re.search(r"^\+\+\+ b/.*\.py$", (PATCHES / name).read_text(), re.M)
    )
    assert (
        f"the {len(APPLIED)} patches of {PATCHES}/series for TensorFlow {TF_VERSION}: "
        f"{python} applied in "
    ) in done.stdout
    for controller in ("mpi", "gloo"):
        ok = re.findall(
            rf"allreduce_check: rank (\d) of 2 \({controller}, [^)]*\): \[3\.0[^\]]*\] ok",
            done.stdout,
        )
        assert sorted(ok) == ["0", "1"], done.stdout


@pytest.mark.horovod
@pytest.mark.mpi
def test_the_allreduce_check_fails_on_a_world_of_the_wrong_size() -> None:
    done = subprocess.run(
        [
            "mpirun",
            "--allow-run-as-root",
            "-np",
            "2",
            str(BIN / "python"),
            "-m",
            "ctrain.train.allreduce_check",
            "3",
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode != 0
    assert done.stdout.count("[3.0, 3.0, 3.0, 3.0] WRONG, want size 3") == 2, done.stdout


@pytest.mark.horovod
def test_horovod_keras_api_in_one_process(tmp_path: Path) -> None:
    done = run(
        [str(BIN / "python"), str(SCRIPTS / "hvd_keras_api.py"), str(tmp_path)],
        clean_env(TF_USE_LEGACY_KERAS="1"),
        timeout=240,
    )
    (result,) = printed_json(done.stdout, "RESULT")
    # 0001: the backend is tf-keras's, the model's
    assert result["backend"].startswith("tf_keras.")
    assert result["callbacks_backend"].startswith("tf_keras.")
    # 0002: a legacy optimizer's momentum is corrected per step (x new_lr / old_lr), restored
    # after; a TF >= 2.11 optimizer keeps its momentum, with one warning; the rate follows both
    momenta = result["legacy_momenta"]
    assert momenta[0] == pytest.approx(0.9) and momenta[1] == pytest.approx(0.9 * 1.25)
    assert result["legacy_momentum_after"] == pytest.approx(0.9)
    assert result["lr"] == result["legacy_lr"] == pytest.approx([0.0175, 0.0275])
    assert len(result["momentum_warnings"]) == 1
    # MetricAverageCallback and the warm-up ran, the warm-up logs the rate
    assert result["warmup_metrics"] == ["loss", "lr", "mae"]
    # 0003: hvd.load_model reads both formats into a DistributedOptimizer
    assert result["load_model"] == {"model.keras": True, "model.h5": True}
    # the elastic callbacks kept the state
    assert result["elastic"] == {"epoch": 3, "batch": 0}


def test_patched_sdist_holds_the_patches_of_this_tensorflow(tmp_path: Path) -> None:
    """What the image builds compile (scripts/wheelhouse.sh puts it in the wheelhouse): exactly
    the patches of this TensorFlow's range."""
    done = subprocess.run(
        [str(REPO / "scripts" / "horovod-wheel.sh"), "--sdist", str(tmp_path), TF_VERSION],
        env=clean_env(PYTHON=str(BIN / "python")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    with tarfile.open(done.stdout.strip()) as tar:
        tar.extractall(tmp_path, filter="data")
    tree = tmp_path / "horovod-0.28.1"
    for patch in sorted(PATCHES.glob("*.patch")):
        check = subprocess.run(
            ["patch", "-d", str(tree), "-p1", "-R", "--force", "--dry-run", "--quiet"],
            input=patch.read_text(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        applied = check.returncode == 0
        assert applied == (patch.name in APPLIED), f"{patch.name}: {check.stdout}"


@pytest.mark.horovod
def test_elastic_keras_callbacks_through_a_membership_change(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    discover = tmp_path / "discover.sh"
    discover.write_text(f"#!/bin/sh\ncat {hosts}\n")
    discover.chmod(0o755)
    done = subprocess.run(
        [
            str(BIN / "horovodrun"),
            *("-np", "2", "--min-np", "1", "--max-np", "2", "--gloo"),
            *("--host-discovery-script", str(discover), "--network-interfaces", "lo"),
            *(str(BIN / "python"), str(SCRIPTS / "hvd_elastic.py"), str(hosts), str(EPOCHS)),
        ],
        env=clean_env(TF_USE_LEGACY_KERAS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    starts = printed_json(done.stdout, "START")
    (result,) = printed_json(done.stdout, "RESULT")
    assert sorted((s["rank"], s["size"], s["epoch"]) for s in starts[:2]) == [(0, 2, 0), (1, 2, 0)]
    # rank 1 was removed; rank 0 resumed alone from a commit after epoch 2, and finished
    (resumed,) = starts[2:]
    assert resumed["rank"] == 0 and resumed["size"] == 1 and resumed["epoch"] >= 2
    assert result == {"rank": 0, "size": 1, "epoch": EPOCHS}
