"""The Docker SDK path against the real engine and the local registry on 127.0.0.1:5000: pull
(new, already present, pinned by digest, unknown tag), push, tag, inspect's labels, and the
progress a person sees: a bar under a pseudo-terminal, at most one line per layer into a pipe.

Each run makes its own small image of four layers (the busybox base and three of random
bytes), pushes it and removes it locally, so a pull really downloads.
"""

from __future__ import annotations

import json
import os
import pty
import secrets
import select
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain.images import docker_api
from ctrain.util.progress import Event
from tests.support.helpers import CTRAIN, REGISTRY, ctrain_env, need, registry_up, run_ctrain
from tests.support.images import busybox_base

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

TIMEOUT = 180
LABEL = "org.ctrain.test"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=TIMEOUT, check=check
    )


def sdk_installed() -> bool:
    try:
        from docker import APIClient  # noqa: F401
    except ImportError:
        return False
    return True


def manifest_layers(ref: str) -> int:
    """How many layers the registry's manifest of ``ref`` lists."""
    name, _, tag = ref.removeprefix(f"{REGISTRY}/").rpartition(":")
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{name}/manifests/{tag}", headers={"Accept": MANIFEST_V2}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return len(json.load(answer)["layers"])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh local image of four layers (three of new random bytes), labelled."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    need(sdk_installed(), "the Docker SDK is not installed (make install: ctrain-hpc[docker])")
    base = busybox_base()
    context = tmp_path_factory.mktemp("context")
    for name, mib in (("a", 3), ("b", 2), ("c", 1)):
        (context / name).write_bytes(secrets.token_bytes(mib << 20))
    (context / "Dockerfile").write_text(
        f'FROM {base}\nCOPY a /a\nCOPY b /b\nCOPY c /c\nLABEL {LABEL}="sdk"\n'
    )
    local = f"ctrain-test/sdk:{os.getpid()}-{int(time.time())}"
    docker("build", "--network", "none", "-q", "-t", local, str(context))
    try:
        yield local
    finally:
        docker("rmi", "-f", local, check=False)


@pytest.fixture(scope="module")
def pushed(built: str) -> Iterator[tuple[str, str]]:
    """(reference, digest) of ``built`` in the registry, pushed by `ctrain push`, then removed
    from the engine under both names (a pull of it downloads every layer but the base)."""
    ref = f"{REGISTRY}/{built}"
    done = run_ctrain("push", built, ref, env=os.environ, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    digest = done.stdout.split("(")[-1].rstrip(")\n")
    assert done.stdout.strip() == f"pushed {ref} ({digest})" and digest.startswith("sha256:")
    docker("rmi", built, ref)
    try:
        yield ref, digest
    finally:
        docker("rmi", "-f", ref, check=False)


@pytest.fixture
def fresh(pushed: tuple[str, str]) -> tuple[str, str]:
    docker("rmi", "-f", pushed[0], check=False)
    return pushed


def pull_env(cache: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "CTRAIN_CACHE_DIR": str(cache), "CTRAIN_RUNTIME": "docker", **extra}


def test_push_sent_every_layer(pushed: tuple[str, str]) -> None:
    ref, digest = pushed
    assert manifest_layers(ref) == 4
    assert docker_api.inspect(docker_api.connect(os.environ), ref, os.environ) is None
    again = run_ctrain("push", ref, env=os.environ, timeout=TIMEOUT)
    assert again.returncode == 2 and again.stderr.startswith("ctrain: error: docker has no image")
    present = run_ctrain("push", "--if-present", ref, env=os.environ, timeout=TIMEOUT)
    assert present.returncode == 0 and present.stdout == "", present


def test_pull_pinned_then_tagged_then_present(fresh: tuple[str, str], tmp_path: Path) -> None:
    ref, digest = fresh
    cache = tmp_path / "cache"
    pinned = f"{ref}@{digest}"
    first = run_ctrain("pull", pinned, env=pull_env(cache), timeout=TIMEOUT)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"pulled {pinned} -> {pinned} ({digest})"
    client = docker_api.connect(os.environ)
    image = docker_api.inspect(client, pinned, os.environ)
    assert image is not None and image.labels[LABEL] == "sdk"
    assert image.repo_digests == (f"{ref.rpartition(':')[0]}@{digest}",)
    by_tag = run_ctrain("pull", ref, env=pull_env(cache), timeout=TIMEOUT)
    assert by_tag.stdout.strip() == f"pulled {ref} -> {ref} ({digest})"  # a new name...
    assert by_tag.stderr == f"ctrain: pulling {ref} with docker\n"  # ...and no layer to fetch
    again = run_ctrain("pull", ref, env=pull_env(cache), timeout=TIMEOUT)
    assert again.stdout.startswith(f"up to date: {ref} ({digest})"), again
    events: list[Event] = []
    said = docker_api.pull(client, ref, os.environ, events.append)
    assert "Status: Image is up to date" in said and events == []


def test_tag_gives_the_image_a_second_name(fresh: tuple[str, str]) -> None:
    ref, _ = fresh
    client = docker_api.connect(os.environ)
    events: list[Event] = []
    said = docker_api.pull(client, ref, os.environ, events.append)
    assert "Status: Downloaded newer image" in said
    assert [e.key for e in events if e.phase in ("done", "present")] == list(
        dict.fromkeys(e.key for e in events)
    )  # every layer it mentions ends done or present
    other = f"ctrain-test/sdk-tagged:{os.getpid()}"
    docker_api.tag(client, ref, other, os.environ)
    try:
        first, second = (docker_api.inspect(client, r, os.environ) for r in (ref, other))
        assert first is not None and second is not None and first.id == second.id
    finally:
        docker("rmi", other, check=False)


def test_an_unknown_tag_is_one_line_with_a_fix(pushed: tuple[str, str], tmp_path: Path) -> None:
    missing = pushed[0].rpartition(":")[0] + ":no-such-tag"
    done = run_ctrain("pull", missing, env=pull_env(tmp_path / "cache"), timeout=TIMEOUT)
    assert done.returncode == 5, done
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"ctrain: error: docker pull {missing} failed: "), line
    assert f"Fix: check the name and tag of {missing}: {REGISTRY} has no such image" in line
    assert "Traceback" not in done.stderr


def test_a_daemon_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    env = pull_env(tmp_path / "cache", DOCKER_HOST=f"unix://{tmp_path}/no.sock")
    done = run_ctrain("pull", f"{REGISTRY}/x:1", env=env, timeout=TIMEOUT)
    assert done.returncode == 5
    assert done.stderr.startswith(
        f"ctrain: error: cannot reach the Docker daemon at unix://{tmp_path}"
    )
    assert "Fix: start it" in done.stderr and done.stderr.count("\n") == 1


def read_pty(fd: int, pid: int) -> str:
    """Everything the child writes to its terminal until it exits (with a deadline)."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed its side
                break
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode(errors="replace")


def test_a_pull_on_a_terminal_draws_a_bar(fresh: tuple[str, str], tmp_path: Path) -> None:
    ref, _ = fresh
    env = ctrain_env(pull_env(tmp_path / "cache", TERM="xterm", COLUMNS="120"))
    pid, fd = pty.fork()
    if pid == 0:  # the child: ctrain with the pseudo-terminal as stdout and stderr
        os.execve(CTRAIN, [CTRAIN, "pull", ref], env)
    screen = read_pty(fd, pid)
    frames = [frame for frame in screen.split("\r\x1b[K") if frame.startswith("pull [")]
    assert len(frames) >= 2, screen
    assert "100%" in frames[-1] and "4/4 layers" in frames[-1], frames[-1]
    assert any("%" in frame and "/s" in frame and "MiB" in frame for frame in frames)
    assert f"pulled {ref} -> {ref}" in screen


def test_a_pull_into_a_pipe_writes_at_most_a_line_per_layer(
    fresh: tuple[str, str], tmp_path: Path
) -> None:
    ref, _ = fresh
    done = run_ctrain("pull", ref, env=pull_env(tmp_path / "cache"), timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    layers = manifest_layers(ref)
    lines = done.stderr.splitlines()
    assert lines[0] == f"ctrain: pulling {ref} with docker"
    assert len(lines) - 1 <= layers and "\r" not in done.stderr, done.stderr
    assert all(line.startswith("pull: layer ") for line in lines[1:]), lines
