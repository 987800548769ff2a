"""``ctrain pull --runtime docker`` against the real engine and the local registry on 127.0.0.1:5000
(scripts/services.sh): a tiny image (Debian's static busybox, `docker import`ed) is pushed, removed
locally, then pulled by ctrain. The engine's own event log tells whether a pull happened."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain import references
from ctrain.images.record import read_sidecar
from tests.support.helpers import REGISTRY, need, registry_up, run_ctrain, start_ctrain
from tests.support.images import BUSYBOX, busybox_tar

pytestmark = pytest.mark.docker

TIMEOUT = 180


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=TIMEOUT, check=check
    )


@pytest.fixture(scope="module")
def pushed() -> Iterator[tuple[str, str]]:
    """(reference, digest) of an image that is in the local registry but not in the engine."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    need(BUSYBOX.is_file(), f"{BUSYBOX} missing (make system installs busybox-static)")
    ref = f"{REGISTRY}/ctrain-test/busybox:{os.getpid()}-{int(time.time())}"
    subprocess.run(
        ["docker", "import", "--change", 'CMD ["/bin/sh"]', "-", ref],
        input=busybox_tar(),
        capture_output=True,
        timeout=TIMEOUT,
        check=True,
    )
    try:
        push = docker("push", ref)
        found = re.search(r"digest: (sha256:[0-9a-f]{64})", push.stdout)
        assert found, push.stdout
        docker("rmi", ref)
        yield ref, found.group(1)
    finally:
        docker("rmi", "-f", ref, check=False)


@pytest.fixture
def fresh(pushed: tuple[str, str]) -> tuple[str, str]:
    """The pushed image, absent from the engine at the start of the test."""
    docker("rmi", "-f", pushed[0], check=False)
    return pushed


def ctrain_pull(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CTRAIN_CACHE_DIR": str(cache), "CTRAIN_RUNTIME": "docker"}
    return run_ctrain("pull", *args, env=env, timeout=TIMEOUT)


def pull_events(ref: str, since: float) -> list[str]:
    """Image pull events of ``ref`` the engine logged since ``since``."""
    done = docker(
        "events",
        "--since",
        f"{since:.3f}",
        "--until",
        f"{time.time():.3f}",
        "--filter",
        "type=image",
        "--filter",
        "event=pull",
        "--format",
        "{{.Actor.ID}}",
    )
    return [line for line in done.stdout.splitlines() if line.strip() == ref]


def present(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0


def record_of(cache: Path, ref: str) -> Path:
    return cache / "docker" / f"{references.safe_name(ref)}.json"


def test_pull_writes_a_sidecar_and_a_second_pull_downloads_nothing(
    fresh: tuple[str, str], tmp_path: Path
) -> None:
    ref, digest = fresh
    cache = tmp_path / "cache"
    assert not present(ref)

    start = time.time()
    first = ctrain_pull(cache, ref)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"pulled {ref} -> {ref} ({digest})"
    assert present(ref)
    assert len(pull_events(ref, start)) == 1

    record = record_of(cache, ref)
    sidecar = read_sidecar(record)
    assert sidecar is not None
    assert (sidecar.ref, sidecar.runtime, sidecar.digest) == (ref, "docker", digest)
    image_id = json.loads(docker("image", "inspect", ref).stdout)[0]["Id"]
    assert sidecar.image_id == image_id
    recorded = record.read_bytes()

    between = time.time()
    for spelling in (ref, f"docker://{ref}"):
        again = ctrain_pull(cache, spelling)
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith(f"up to date: {ref} ({digest})")
        assert again.stdout.rstrip().endswith("nothing downloaded")
    assert pull_events(ref, between) == []
    assert record.read_bytes() == recorded


def test_force_asks_the_registry_which_has_nothing_new(
    fresh: tuple[str, str], tmp_path: Path
) -> None:
    ref, digest = fresh
    cache = tmp_path / "cache"
    assert ctrain_pull(cache, ref).returncode == 0
    start = time.time()
    forced = ctrain_pull(cache, "--force", ref)
    assert forced.returncode == 0, forced.stderr
    assert len(pull_events(ref, start)) == 1  # docker pull ran...
    assert "nothing downloaded (docker pull: up to date)" in forced.stdout  # ...and said so
    sidecar = read_sidecar(record_of(cache, ref))
    assert sidecar is not None and sidecar.digest == digest


def test_three_concurrent_pulls_pull_once(fresh: tuple[str, str], tmp_path: Path) -> None:
    ref, digest = fresh
    cache = tmp_path / "cache"
    env = {**os.environ, "CTRAIN_CACHE_DIR": str(cache), "CTRAIN_RUNTIME": "docker"}
    start = time.time()
    procs = [start_ctrain("pull", ref, env=env) for _ in range(3)]
    results = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], results
    firsts = sorted(out.split()[0] for out, _ in results)
    assert firsts == ["pulled", "up", "up"], results
    assert len(pull_events(ref, start)) == 1
    assert present(ref)


def test_a_missing_image_is_one_line(pushed: tuple[str, str], tmp_path: Path) -> None:
    missing = f"{REGISTRY}/ctrain-test/no-such-image:1"
    done = ctrain_pull(tmp_path / "cache", missing)
    assert done.returncode == 5
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"ctrain: error: docker pull {missing} failed: ")
    assert f"Fix: check the name and tag of {missing}: {REGISTRY} has no such image" in line
    assert "Traceback" not in done.stderr
    assert not record_of(tmp_path / "cache", missing).exists()


def test_docker_pull_needs_no_scratch_cache(fresh: tuple[str, str], tmp_path: Path) -> None:
    """The image lives in the engine's store; ctrain keeps only a small record, so $HOME will do
    (unlike an apptainer pull, which is refused there without --allow-home-cache)."""
    ref, _ = fresh
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTRAIN_", "APPTAINER"))}
    env.update({"HOME": str(home), "CTRAIN_RUNTIME": "docker", "XDG_CONFIG_HOME": str(home)})
    for key in ("SCRATCH", "WORK"):
        env.pop(key, None)
    done = run_ctrain("pull", ref, env=env, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert list(home.rglob(f"{references.safe_name(ref)}.json"))
