"""The Docker engine's API through the Docker SDK for Python (``docker`` on PyPI, the optional
extra ``ctrain-hpc[docker]``): pull, push, inspect and tag, the image work that is a request and
an answer rather than a process to replace (``ctrain exec`` keeps exec-ing the docker CLI),
and the export of an image's filesystem that a Charliecloud pull unpacks.

This module alone imports the SDK, and only ``ctrain pull``/``push`` import this module:
``ctrain --help``, ``launch`` and ``exec`` never load it. The client talks to $DOCKER_HOST
(with $DOCKER_TLS_VERIFY and $DOCKER_CERT_PATH), else the default socket. Every failure
becomes an ``ExternalToolError`` saying what to do: the SDK missing, the daemon down, no
permission on its socket, an image the registry does not have, a login the registry wants.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctrain.errors import ExternalToolError
from ctrain.images.engine_image import EngineImage, image_from_inspect, repository_of
from ctrain.references import digest_in_ref
from ctrain.util.progress import Event, docker_event

if TYPE_CHECKING:
    from docker import APIClient

DEFAULT_HOST = "unix:///var/run/docker.sock"
TIMEOUT = 600  # seconds without a byte from the engine before a request fails
SDK_FIX = (
    "install the Docker SDK for Python: pip install 'ctrain-hpc[docker]' (or pip install docker); "
    "podman and apptainer need no SDK"
)

OnEvent = Callable[[Event], None]


def where(environ: Mapping[str, str]) -> str:
    """The daemon the client talks to."""
    return environ.get("DOCKER_HOST") or DEFAULT_HOST


def unreachable(message: str, host: str) -> ExternalToolError:
    """The error for a daemon that cannot be reached (``message``: what the SDK said)."""
    said = " ".join(message.split())
    if "permission denied" in said.lower():
        return ExternalToolError(
            f"no permission to use the Docker daemon's socket {host}",
            "add yourself to the docker group (sudo usermod -aG docker $USER, then log in "
            "again), or point DOCKER_HOST at a daemon of your own (rootless Docker)",
        )
    return ExternalToolError(
        f"cannot reach the Docker daemon at {host} ({said})",
        "start it (sudo systemctl start docker; in this repository: make services), "
        "or point DOCKER_HOST at a running one",
    )


def registry_of(ref: str) -> str:
    """``127.0.0.1:5000/a/b:1`` -> ``127.0.0.1:5000``; Docker Hub for a name without a host."""
    first, slash, _ = ref.partition("/")
    hosted = slash and ("." in first or ":" in first or first == "localhost")
    return first if hosted else "docker.io"


def refused(action: str, ref: str, message: str, status: int | None) -> ExternalToolError:
    """The error for a request the engine or the registry refused (``status``: HTTP's)."""
    said = " ".join(message.split()) or f"HTTP {status}"
    lowered = said.lower()
    text = f"docker {action} {ref} failed: {said}"
    if status == 401 or any(
        word in lowered for word in ("unauthorized", "authentication required", "denied")
    ):
        fix = f"log in to the registry (docker login {registry_of(ref)}), and check the name"
    elif status == 404 or "manifest unknown" in lowered or "not found" in lowered:
        fix = (
            f"check the name and tag of {ref}: {registry_of(ref)} has no such image "
            "(push it first, or pick a tag it lists)"
        )
    else:
        fix = f"check the reference, the registry and `docker login {registry_of(ref)}`"
    return ExternalToolError(text, fix)


def split_ref(ref: str) -> tuple[str, str]:
    """(repository, tag or digest) as the API takes them: ``r/x:1@sha256:..`` ->
    (``r/x``, ``sha256:..``); ``r/x`` -> (``r/x``, ``latest``)."""
    repository = repository_of(ref)
    name = ref.split("@", 1)[0]
    tag = name[len(repository) + 1 :] if len(name) > len(repository) else "latest"
    return repository, digest_in_ref(ref) or tag


def connect(environ: Mapping[str, str]) -> APIClient:
    """A client of the daemon at $DOCKER_HOST (else the default socket), its API version
    agreed with the daemon."""
    try:  # a submodule: the repository's docker/ directory would pass for the package
        from docker import APIClient, utils
    except ImportError as exc:
        raise ExternalToolError("the Docker SDK for Python is not installed", SDK_FIX) from exc
    with _answered("connect to", where(environ), environ):
        options = utils.kwargs_from_env(environment=dict(environ))
        return APIClient(version="auto", timeout=TIMEOUT, **options)


@contextlib.contextmanager
def _answered(action: str, ref: str, environ: Mapping[str, str]) -> Iterator[None]:
    """The SDK's and requests' exceptions as ctrain's errors."""
    import docker.errors
    import requests

    try:
        yield
    except docker.errors.APIError as exc:
        raise refused(action, ref, str(exc.explanation or exc), exc.status_code) from exc
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise unreachable(str(exc), where(environ)) from exc


def inspect(client: APIClient, ref: str, environ: Mapping[str, str]) -> EngineImage | None:
    """Id, repo digests and labels of ``ref`` in the engine; None when it has no such image."""
    import docker.errors

    with _answered("image inspect", ref, environ):
        try:
            answer = client.inspect_image(ref)
        except docker.errors.NotFound:
            return None
    try:
        return image_from_inspect(answer)
    except ValueError as exc:
        raise ExternalToolError(
            f"the Docker engine at {where(environ)} answered image inspect {ref} with {exc}",
            "check the engine (docker version, docker image inspect REF)",
        ) from None


def export_image(
    client: APIClient, ref: str, tar: Path, environ: Mapping[str, str]
) -> tuple[str, ...]:
    """The filesystem of the image ``ref`` written to ``tar`` (uncompressed) through a container
    created from it, never started, then removed; the image's ``ENV`` (``NAME=VALUE`` items)."""
    with _answered("export", ref, environ):
        config = client.inspect_image(ref).get("Config") or {}
        container = client.create_container(ref, command="/bin/true")["Id"]
        try:
            with tar.open("wb") as out:
                for chunk in client.export(container):
                    out.write(chunk)
        finally:
            client.remove_container(container)
    return tuple(str(item) for item in config.get("Env") or ())


def tag(client: APIClient, source: str, target: str, environ: Mapping[str, str]) -> None:
    """Give the image ``source`` the name ``target`` as well."""
    repository, name = split_ref(target)
    with _answered("tag", source, environ):
        client.tag(source, repository, name, force=True)


def pull(client: APIClient, ref: str, environ: Mapping[str, str], on_event: OnEvent) -> str:
    """Pull ``ref``, handing each layer's progress to ``on_event``; the engine's closing
    ``Digest: ...`` and ``Status: ...`` lines."""
    repository, name = split_ref(ref)
    with _answered("pull", ref, environ):
        stream = client.pull(repository, tag=name, stream=True, decode=True)
        return _follow(stream, "pull", ref, on_event)


def push(client: APIClient, ref: str, environ: Mapping[str, str], on_event: OnEvent) -> str:
    """Push ``ref`` to its registry, handing each layer's progress to ``on_event``; the digest
    the registry gave it."""
    repository, name = split_ref(ref)
    with _answered("push", ref, environ):
        stream = client.push(repository, tag=name, stream=True, decode=True)
        said = _follow(stream, "push", ref, on_event)
    digests = [word for word in said.split() if word.startswith("sha256:")]
    if not digests:
        raise ExternalToolError(
            f"docker push {ref} ended without a digest ({said.strip() or 'no answer'})",
            "push it again; check the registry's log if it keeps failing",
        )
    return digests[-1]


def _follow(stream: Iterator[Any], action: str, ref: str, on_event: OnEvent) -> str:
    """Read the engine's JSON messages to the end: layer events to ``on_event``, an error
    message raised, the other statuses (``Digest:``, ``Status:``) returned as lines."""
    said: list[str] = []
    for message in stream:
        if not isinstance(message, dict):
            continue
        if "error" in message:
            detail = message.get("errorDetail")
            code = detail.get("code") if isinstance(detail, dict) else None
            status = code if isinstance(code, int) else None
            raise refused(action, ref, str(message["error"]), status)
        event = docker_event(message)
        if event is not None:
            on_event(event)
        elif isinstance(message.get("status"), str) and "id" not in message:
            said.append(message["status"])
        elif isinstance(message.get("aux"), dict) and isinstance(message["aux"].get("Digest"), str):
            said.append(f"Digest: {message['aux']['Digest']}")
    return "\n".join(said) + "\n"


def publish(source: str, target: str, environ: Mapping[str, str], on_event: OnEvent) -> str | None:
    """Push ``source`` as ``target`` (tagged so first when they differ); the registry's digest,
    or None when the engine has no ``source``."""
    client = connect(environ)
    if inspect(client, source, environ) is None:
        return None
    if target != source:
        tag(client, source, target, environ)
    return push(client, target, environ, on_event)
