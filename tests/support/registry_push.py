"""A tiny image pushed straight to the local registry over its v2 API (no Docker needed): one
gzip layer holding /bin/busybox, /bin/sh and /etc, and a config with an environment.

The tag names a manifest list (as a multi-arch image's does), not the image manifest itself:
this registry (distribution 2.x) answers enroot's first request, which accepts only lists and
indexes, with 400 for a single manifest, and enroot ignores only 401 and 404 there
(docs/pyxis-facts.md, "enroot import")."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import urllib.request
from pathlib import Path

from tests.support.helpers import REGISTRY

BUSYBOX = Path("/bin/busybox")
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
LIST_TYPE = "application/vnd.docker.distribution.manifest.list.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
ENV = ["PATH=/bin", "TINY_IMAGE=1"]


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("bin", "etc"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        data = BUSYBOX.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname = tarfile.SYMTYPE, "busybox"
        tar.addfile(link)
    return buffer.getvalue()


def _request(method: str, url: str, data: bytes = b"", kind: str = "") -> str:
    headers = {"Content-Type": kind or "application/octet-stream"}
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.headers.get("Location", ""))


def _put_blob(repo: str, data: bytes) -> str:
    digest = _digest(data)
    location = _request("POST", f"http://{REGISTRY}/v2/{repo}/blobs/uploads/")
    if location.startswith("/"):
        location = f"http://{REGISTRY}{location}"
    joiner = "&" if "?" in location else "?"
    _request("PUT", f"{location}{joiner}digest={digest}", data)
    return digest


def push_tiny(repo: str, tag: str) -> str:
    """Push the image as ``REGISTRY/repo:tag`` (a list of one amd64 manifest); the list's
    digest."""
    tar = layer_tar()
    layer = gzip.compress(tar, mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ENV, "Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": [_digest(tar)]},
        }
    ).encode()
    blobs = [(CONFIG_TYPE, config), (LAYER_TYPE, layer)]
    described = [{"mediaType": k, "size": len(d), "digest": _put_blob(repo, d)} for k, d in blobs]
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": described[0],
            "layers": described[1:],
        }
    ).encode()
    digest = _digest(manifest)
    _request("PUT", f"http://{REGISTRY}/v2/{repo}/manifests/{digest}", manifest, MANIFEST_TYPE)
    platform = {"architecture": "amd64", "os": "linux"}
    entry = {"mediaType": MANIFEST_TYPE, "size": len(manifest), "digest": digest}
    listed = json.dumps(
        {"schemaVersion": 2, "mediaType": LIST_TYPE, "manifests": [{**entry, "platform": platform}]}
    ).encode()
    _request("PUT", f"http://{REGISTRY}/v2/{repo}/manifests/{tag}", listed, LIST_TYPE)
    return _digest(listed)
