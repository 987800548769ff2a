"""images/docker_api.py without an engine: which error and fix each failure gets, references as
the API takes them, the engine's message stream read to its end, and that the commands which
must start fast (``--help``, ``launch``, ``exec``) never import the SDK or this module."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain.errors import ExternalToolError
from ctrain.images import docker_api
from ctrain.images.engine_image import image_from_inspect
from ctrain.util.progress import Event
from tests.support.helpers import ctrain_env

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("ref", "split"),
    [
        ("r/x", ("r/x", "latest")),
        ("r/x:1", ("r/x", "1")),
        ("127.0.0.1:5000/a/b:2", ("127.0.0.1:5000/a/b", "2")),
        ("127.0.0.1:5000/a/b", ("127.0.0.1:5000/a/b", "latest")),
        (f"r/x@{DIGEST}", ("r/x", DIGEST)),
        (f"r/x:1@{DIGEST}", ("r/x", DIGEST)),
    ],
)
def test_split_ref(ref: str, split: tuple[str, str]) -> None:
    assert docker_api.split_ref(ref) == split


@pytest.mark.parametrize(
    ("ref", "registry"),
    [
        ("busybox:1", "docker.io"),
        ("library/busybox", "docker.io"),
        ("127.0.0.1:5000/a:1", "127.0.0.1:5000"),
        ("ghcr.io/o/x:1", "ghcr.io"),
        ("localhost/x", "localhost"),
    ],
)
def test_registry_of(ref: str, registry: str) -> None:
    assert docker_api.registry_of(ref) == registry


REF = "127.0.0.1:5000/a/b:1"


@pytest.mark.parametrize(
    ("message", "status", "fix"),
    [
        ("manifest for a/b:1 not found: manifest unknown", 404, "check the name and tag of"),
        ("manifest unknown", None, "check the name and tag of"),
        ("unauthorized: authentication required", 401, "docker login 127.0.0.1:5000"),
        ("pull access denied for a/b, repository does not exist", 404, "docker login"),
        ("Get https://x/v2/: http: server gave HTTP response", 500, "check the reference"),
    ],
)
def test_refused(message: str, status: int | None, fix: str) -> None:
    error = docker_api.refused("pull", REF, message, status)
    assert isinstance(error, ExternalToolError) and error.exit_code == 5
    assert error.message == f"docker pull {REF} failed: {message}"
    assert fix in error.fix


def test_unreachable_tells_permission_from_a_missing_daemon() -> None:
    denied = docker_api.unreachable(
        "Error while fetching server API version: ('Connection aborted.', "
        "PermissionError(13, 'Permission denied'))",
        docker_api.DEFAULT_HOST,
    )
    assert (
        denied.message
        == f"no permission to use the Docker daemon's socket {docker_api.DEFAULT_HOST}"
    )
    assert "docker group" in denied.fix
    down = docker_api.unreachable("('Connection aborted.', FileNotFoundError(2, 'x'))", "unix:///s")
    assert down.message.startswith("cannot reach the Docker daemon at unix:///s (")
    assert "make services" in down.fix and "DOCKER_HOST" in down.fix


def test_where_is_docker_host_else_the_socket() -> None:
    assert docker_api.where({}) == "unix:///var/run/docker.sock"
    assert docker_api.where({"DOCKER_HOST": "tcp://h:2375"}) == "tcp://h:2375"


def messages(*items: dict) -> Iterator[dict]:
    yield from items


def test_follow_hands_on_layers_and_returns_the_closing_lines() -> None:
    seen: list[Event] = []
    said = docker_api._follow(
        messages(
            {"status": "Pulling from a/b", "id": "1"},
            {"status": "Pull complete", "progressDetail": {}, "id": "k1"},
            {"status": f"Digest: {DIGEST}"},
            {"status": "Status: Downloaded newer image for a/b:1"},
        ),
        "pull",
        REF,
        seen.append,
    )
    assert seen == [Event("k1", "done")]
    assert said == f"Digest: {DIGEST}\nStatus: Downloaded newer image for a/b:1\n"


def test_follow_raises_an_error_in_the_stream() -> None:
    with pytest.raises(ExternalToolError) as caught:
        docker_api._follow(
            messages({"error": "unauthorized: x", "errorDetail": {"message": "unauthorized: x"}}),
            "push",
            REF,
            lambda event: None,
        )
    assert caught.value.message == f"docker push {REF} failed: unauthorized: x"
    assert "docker login 127.0.0.1:5000" in caught.value.fix


def test_follow_keeps_a_push_digest_from_aux() -> None:
    said = docker_api._follow(
        messages({"progressDetail": {}, "aux": {"Tag": "1", "Digest": DIGEST, "Size": 9}}),
        "push",
        REF,
        lambda event: None,
    )
    assert said == f"Digest: {DIGEST}\n"


def test_labels_come_from_the_inspect_record() -> None:
    record = {"Id": "sha256:1", "RepoDigests": [f"a/b@{DIGEST}"], "Config": {"Labels": {"x": "y"}}}
    image = image_from_inspect(record)
    assert (image.id, image.repo_digests, dict(image.labels)) == (
        "sha256:1",
        (f"a/b@{DIGEST}",),
        {"x": "y"},
    )
    assert dict(image_from_inspect({"Id": "i", "Config": {"Labels": None}}).labels) == {}


def test_a_missing_sdk_is_an_error_with_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "docker", None)  # import docker raises ImportError
    with pytest.raises(ExternalToolError) as caught:
        docker_api.connect({})
    assert "pip install 'ctrain-hpc[docker]'" in caught.value.fix


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["launch", "--explain", "--json"],
        ["exec", "--dry-run", "--runtime", "docker", "img", "--", "true"],
    ],
)
def test_fast_commands_never_import_the_sdk(args: list[str], tmp_path: Path) -> None:
    code = (
        "import sys, json\n"
        "from ctrain.cli import main\n"
        "try:\n"
        f"    main({args!r})\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "found = [m for m in sys.modules if m.split('.')[0] in ('docker', 'requests')\n"
        "         or m in ('ctrain.images.docker_api', 'ctrain.util.progress')]\n"
        "print(json.dumps(sorted(found)))\n"
    )
    env = ctrain_env({"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


def test_push_checks_both_references_before_it_connects(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from ctrain.cli import main

    monkeypatch.setitem(sys.modules, "docker", None)  # connecting would fail differently
    for args in (["bad ref"], ["a:1", "oras://r/a:1"]):
        result = CliRunner().invoke(main, ["push", *args])
        assert result.exit_code == 2, result.output
        assert "Docker SDK" not in result.output


class NoId:
    """An engine whose inspect answer has no image Id (a proxy in front, another API)."""

    def inspect_image(self, ref: str) -> dict[str, object]:
        return {"RepoDigests": []}


def test_an_inspect_answer_without_an_id_is_one_error_line() -> None:
    with pytest.raises(ExternalToolError) as caught:
        docker_api.inspect(NoId(), REF, {"DOCKER_HOST": "unix:///run/x.sock"})  # type: ignore[arg-type]
    assert caught.value.exit_code == 5
    assert caught.value.message == (
        f"the Docker engine at unix:///run/x.sock answered image inspect {REF} with no image Id "
        "in the inspect output"
    )
