"""``ctrain pull --runtime pyxis`` for real through the enroot stand-in
(tests/support/fake_pyxis.py): the image is fetched from the local registry over HTTP and made into
a squashfs file by mksquashfs, into ctrain's cache with enroot's paths there (nothing under $HOME);
a second pull, and ``ctrain resolve``, find it recorded and import nothing; an import stopped
half-way leaves no file; a pull waits for another that holds the lock. The stand-in is enroot as
documented, not enroot itself (README)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ctrain.images import pull
from ctrain.images.stores import enroot
from ctrain.images.stores.base import PullAsk
from ctrain.util import locks
from tests.support import fake_pyxis
from tests.support.helpers import (
    CTRAIN,
    REGISTRY,
    ctrain_env,
    need,
    registry_up,
    run_ctrain,
    sandbox,
    wait_for,
)
from tests.support.registry_push import BUSYBOX, ENV, push_tiny

pytestmark = pytest.mark.timeout(180)
TIMEOUT = 120


@pytest.fixture(scope="module")
def ref() -> str:
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    need(BUSYBOX.is_file(), f"{BUSYBOX} missing (make system installs busybox-static)")
    need(shutil.which("mksquashfs") is not None, "mksquashfs missing (squashfs-tools)")
    tag = f"{os.getpid()}-{int(time.time())}"
    push_tiny("ctrain-test/enroot-tiny", tag)
    return f"docker://{REGISTRY}/ctrain-test/enroot-tiny:{tag}"


def setup(tmp_path: Path, **extra: str) -> tuple[dict[str, str], Path, Path]:
    """(environment, the target file, the stand-in's log)."""
    box = sandbox(tmp_path)
    fake_pyxis.install_enroot(box.bin)
    (tmp_path / "tmp").mkdir()
    log = tmp_path / "enroot.jsonl"
    env = box.with_env(
        CTRAIN_CACHE_DIR=str(tmp_path / "cache"),
        CTRAIN_MIN_FREE_GB="1",
        TMPDIR=str(tmp_path / "tmp"),
        ENROOT_ALLOW_HTTP="yes",  # the local registry speaks HTTP
        FAKE_ENROOT_LOG=str(log),
        **extra,
    )
    return env, tmp_path / "cache" / "images", log


def imports(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_pull_imports_once_into_the_cache(ref: str, tmp_path: Path) -> None:
    env, images, log = setup(tmp_path)
    done = run_ctrain("pull", "--runtime", "pyxis", ref, env=env, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    target = pull.plan(
        PullAsk(ref=ref, runtime="pyxis", program="enroot", cache_root=tmp_path / "cache")
    ).target
    assert target is not None and done.stdout.startswith(f"pulled {enroot.import_uri(ref)}")
    assert enroot.squashfs_state(target).problem is None
    shown = subprocess.run(["unsquashfs", "-cat", str(target), "etc/environment"],
                           capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    assert shown.stdout.split() == ENV  # the image's config, written as enroot does
    (call,) = imports(log)
    assert call["argv"][:2] == ["import", "-o"]  # type: ignore[index]
    given = call["env"]
    assert isinstance(given, dict)
    assert given["ENROOT_CACHE_PATH"] == str(tmp_path / "cache" / "enroot" / "cache")
    assert given["ENROOT_TEMP_PATH"] == str(tmp_path / "tmp")
    assert not any((tmp_path / "home").iterdir())  # enroot made nothing under $HOME

    again = run_ctrain("pull", "--runtime", "pyxis", ref, env=env, timeout=TIMEOUT)
    assert again.returncode == 0 and again.stdout.startswith("up to date"), again.stderr
    resolved = run_ctrain("resolve", "--runtime", "pyxis", ref, env=env, timeout=TIMEOUT)
    assert resolved.returncode == 0 and resolved.stdout.strip() == str(target), resolved.stderr
    assert len(imports(log)) == 1
    assert sorted(p.name for p in images.iterdir()) == sorted(
        [target.name, f"{target.name}.json", f"{target.name}.lock"]
    )


def test_an_interrupted_import_leaves_no_file(ref: str, tmp_path: Path) -> None:
    marker = tmp_path / "holding"
    env, images, log = setup(tmp_path, FAKE_ENROOT_HOLD=str(marker))
    with subprocess.Popen(
        [CTRAIN, "pull", "--runtime", "pyxis", ref], env=ctrain_env(env), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    ) as pulling:  # fmt: skip
        wait_for(marker.exists, "the stand-in's half-written file", timeout=60)
        assert [p for p in images.iterdir() if ".pull-" in p.name]  # the half file is there
        pulling.send_signal(signal.SIGTERM)
        _, stderr = pulling.communicate(timeout=TIMEOUT)
    assert pulling.returncode != 0 and "stopped by SIGTERM" in stderr, stderr
    assert [p.name for p in images.iterdir() if not p.name.endswith(".lock")] == []

    env.pop("FAKE_ENROOT_HOLD")
    done = run_ctrain("pull", "--runtime", "pyxis", ref, env=env, timeout=TIMEOUT)
    assert done.returncode == 0 and done.stdout.startswith("pulled"), done.stderr


def test_a_pull_waits_for_the_lock(ref: str, tmp_path: Path) -> None:
    env, images, log = setup(tmp_path)
    target = pull.plan(
        PullAsk(ref=ref, runtime="pyxis", program="enroot", cache_root=tmp_path / "cache")
    ).target
    assert target is not None
    images.mkdir(parents=True)
    said = tmp_path / "stderr"
    with locks.hold_lock(target.with_name(target.name + ".lock"), "the test", print):
        with said.open("w") as errors:
            pulling = subprocess.Popen(
                [CTRAIN, "pull", "--runtime", "pyxis", ref], env=ctrain_env(env), text=True,
                stdout=subprocess.PIPE, stderr=errors,
            )  # fmt: skip
        wait_for(lambda: "(the test)" in said.read_text(), "the pull to wait", timeout=60)
        assert not target.exists() and imports(log) == []
    stdout, _ = pulling.communicate(timeout=TIMEOUT)
    assert pulling.returncode == 0 and stdout.startswith("pulled"), said.read_text()
    assert len(imports(log)) == 1


def test_doctor_sees_pyxis_and_enroot_through_the_stand_ins(tmp_path: Path) -> None:
    env, _, _ = setup(tmp_path)
    fake_pyxis.install(tmp_path / "bin")  # srun --help then lists pyxis' options
    done = run_ctrain("doctor", "--json", env=env, timeout=TIMEOUT)
    (slurm,) = [c for c in json.loads(done.stdout)["checks"] if c["name"] == "slurm"]
    assert slurm["detail"].endswith(f"pyxis loaded, enroot 4.1.2 ({tmp_path / 'bin' / 'enroot'})")
