"""Images given as URIs: which are remote (they need the network, even with a warm cache: the
manifest is asked for first), fetching them for real from a registry on 127.0.0.1/localhost
(registry v2 API: manifest, then the config blob) or modelling other registries, and Apptainer's
cache (cache/oci-tmp/<digest>). Every fetch appends a ``download`` event to the log."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from tests.support.standin.identity import Fatal, Identity
from tests.support.standin.sif import Metadata

REMOTE = ("docker://", "oras://", "library://", "shub://", "http://", "https://")
LOCAL_REGISTRY = re.compile(
    r"^docker://((?:127\.0\.0\.1|localhost)(?::\d+)?)/([^@:]+)(?::([\w.-]+))?(?:@(\S+))?$"
)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ACCEPT = ", ".join(
    "application/vnd." + kind
    for kind in (
        "oci.image.index.v1+json",
        "docker.distribution.manifest.list.v2+json",
        "oci.image.manifest.v1+json",
        "docker.distribution.manifest.v2+json",
    )
)
Event = Callable[[dict[str, object]], None]


def is_uri(image: str) -> bool:
    return re.match(r"^[a-z][a-z0-9-]*:", image) is not None


def check_reference(ref: str, verb: str) -> None:
    """pull, exec, run and shell reject ``docker-daemon://`` (facts: "docker-daemon reference
    form"); only build takes it."""
    if verb != "build" and ref.startswith("docker-daemon://"):
        raise Fatal(f"Unable to handle {ref} uri: invalid reference format")


def cache_dir(who: Identity, environ: dict[str, str]) -> Path:
    given = who.setting(environ, "CACHEDIR")
    home = Path(environ.get("HOME", "/"))
    return (Path(given) if given else home / who.cache_dirname / "cache") / "cache"


def sha256(data: bytes) -> str:
    import hashlib  # not at the top: the stand-in's start-up time

    return "sha256:" + hashlib.sha256(data).hexdigest()


def modelled(ref: str, environ: dict[str, str]) -> tuple[str, Metadata]:
    """A registry this machine cannot reach: digest and config synthesised from the reference,
    the environment from FAKE_APPTAINER_IMAGE_ENV (JSON) or just PATH."""
    env = json.loads(environ.get("FAKE_APPTAINER_IMAGE_ENV") or "{}") or {"PATH": DEFAULT_PATH}
    return sha256(ref.encode()), {"environment": env}


def _get(url: str, accept: str) -> tuple[bytes, dict[str, str]]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read(), {k.lower(): v for k, v in response.headers.items()}
    except (urllib.error.URLError, OSError) as exc:
        raise Fatal(f"Unable to fetch {url}: {exc}") from exc


def manifest(ref: str, plain_http: bool) -> tuple[str, str, str]:
    """(registry base URL, manifest digest, config digest) of a local-registry reference; it
    serves plain HTTP, which Apptainer speaks to a docker:// registry only with --no-https."""
    found = LOCAL_REGISTRY.match(ref)
    if found is None:
        raise Fatal(f"Unable to handle {ref} uri: invalid reference format")
    host, name, tag, digest = found.groups()
    if not plain_http:
        raise Fatal(
            f"While making image from oci registry: error fetching image to cache: failed to "
            f'get checksum for {ref}: pinging container registry {host}: Get "https://{host}'
            f'/v2/": http: server gave HTTP response to HTTPS client'
        )
    base = f"http://{host}/v2/{name}"
    body, headers = _get(f"{base}/manifests/{digest or tag or 'latest'}", ACCEPT)
    top = headers.get("docker-content-digest") or sha256(body)
    document = json.loads(body)
    for entry in document.get("manifests", []):  # an index: take linux/amd64
        platform = entry.get("platform", {})
        if (platform.get("os"), platform.get("architecture")) == ("linux", "amd64"):
            document = json.loads(_get(f"{base}/manifests/{entry['digest']}", ACCEPT)[0])
            break
    return base, top, str(document["config"]["digest"])


def fetch(
    ref: str, environ: dict[str, str], event: Event, plain_http: bool
) -> tuple[str, Metadata]:
    """(digest, metadata) of a remote image, fetched (or modelled) now; logs the download."""
    if LOCAL_REGISTRY.match(ref):
        base, digest, config_digest = manifest(ref, plain_http)
        config = json.loads(_get(f"{base}/blobs/{config_digest}", "*/*")[0])
        inner = config.get("config") or {}
        env = dict(pair.partition("=")[::2] for pair in inner.get("Env") or [])
        metadata: Metadata = {"environment": env, "labels": inner.get("Labels") or {}}
        metadata |= {"entrypoint": inner.get("Entrypoint") or [], "cmd": inner.get("Cmd") or []}
    else:
        digest, metadata = modelled(ref, environ)
    event({"event": "download", "ref": ref, "host": os.uname().nodename})
    return digest, metadata


def digest_of(ref: str, environ: dict[str, str], plain_http: bool) -> str:
    """Ask the registry for the manifest digest: needs the network (facts: remote IMAGE)."""
    if environ.get("FAKE_APPTAINER_OFFLINE") == "1":
        host = re.sub(r"^[a-z]+://", "", ref).split("/", 1)[0]
        raise Fatal(
            f"Unable to handle {ref} uri: failed to get checksum for {ref}: "
            f"dial tcp: lookup {host}: no route to host (offline)"
        )
    if LOCAL_REGISTRY.match(ref):
        return manifest(ref, plain_http)[1]
    return modelled(ref, environ)[0]
