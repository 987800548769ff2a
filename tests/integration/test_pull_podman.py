"""``ctrain pull --runtime podman`` against real (rootful) podman and the local registry on
127.0.0.1:5000: a tiny busybox image podman pushed, removed from its store, then pulled by
ctrain. Podman's own event log tells whether a pull happened."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain import references
from ctrain.images.record import read_sidecar
from tests.support.helpers import REGISTRY, run_ctrain
from tests.support.podman_cli import TIMEOUT, podman, present, pull_events, push_busybox

pytestmark = [pytest.mark.podman, pytest.mark.timeout(TIMEOUT * 2)]


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(reference, digest) of an image in the local registry, not in podman's store."""
    ref, digest = push_busybox("podman-busybox", tmp_path_factory.mktemp("push"))
    try:
        yield ref, digest
    finally:
        podman("rmi", "-f", ref, check=False)


@pytest.fixture
def fresh(pushed: tuple[str, str]) -> tuple[str, str]:
    podman("rmi", "-f", pushed[0], check=False)
    return pushed


def ctrain_pull(cache: Path, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "CTRAIN_CACHE_DIR": str(cache), "CTRAIN_RUNTIME": "podman"}
    done = run_ctrain("pull", *args, env=env, timeout=TIMEOUT)
    return done.returncode, done.stdout, done.stderr


def test_pull_records_the_registry_digest_and_a_second_pull_downloads_nothing(
    fresh: tuple[str, str], tmp_path: Path
) -> None:
    ref, digest = fresh
    cache = tmp_path / "cache"
    assert not present(ref)

    start = time.time()
    code, out, err = ctrain_pull(cache, ref)
    assert code == 0, err
    assert out.strip() == f"pulled {ref} -> {ref} ({digest})"
    assert f"pulling {ref} with podman" in err
    assert present(ref)
    assert len(pull_events(ref, start)) == 1

    record = cache / "docker" / f"{references.safe_name(ref)}.json"
    sidecar = read_sidecar(record)
    assert sidecar is not None
    assert (sidecar.ref, sidecar.runtime, sidecar.digest) == (ref, "podman", digest)
    inspected = json.loads(podman("image", "inspect", ref))[0]
    assert sidecar.image_id == inspected["Id"]

    between = time.time()
    for spelling in (ref, f"docker://{ref}"):
        code, out, err = ctrain_pull(cache, spelling)
        assert code == 0, err
        assert out.startswith(f"up to date: {ref} ({digest})")
        assert out.rstrip().endswith("nothing downloaded")
    assert pull_events(ref, between) == []

    # --force asks podman again; it prints no Status: line, and the image did not change
    code, out, err = ctrain_pull(cache, ref, "--force")
    assert code == 0, err
    assert out.startswith(f"up to date: {ref} ({digest})"), out


def test_a_missing_image_is_one_line(pushed: tuple[str, str], tmp_path: Path) -> None:
    missing = f"{REGISTRY}/ctrain-test/no-such-image:1"
    code, _, err = ctrain_pull(tmp_path / "cache", missing)
    assert code == 5
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"ctrain: error: podman pull {missing} failed: ")
    assert "Fix: check the reference, the registry and `podman login`" in line
    assert "Traceback" not in err
