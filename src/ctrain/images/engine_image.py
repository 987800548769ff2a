"""Docker and Podman images, pure parts: the argv of podman's pull and inspect, and what the
engines say (image id, digests, labels, whether anything was downloaded). Docker's answers come
through its API (``images.docker_api``), podman's from its CLI: both read the same way here."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ctrain.references import digest_in_ref

_DIGEST_LINE = re.compile(r"^Digest: (sha256:[0-9a-f]{64})", re.MULTILINE)

PullStatus = Literal["downloaded", "up to date", "unknown"]


def engine_pull_argv(program: str, ref: str) -> list[str]:
    return [program, "pull", ref]


def engine_inspect_argv(program: str, ref: str) -> list[str]:
    return [program, "image", "inspect", ref]


@dataclass(frozen=True)
class EngineImage:
    id: str
    repo_digests: tuple[str, ...]
    labels: Mapping[str, str] = field(default_factory=dict)


def image_from_inspect(item: object) -> EngineImage:
    """Id, repo digests and labels from one image's inspect record (the engine API's answer,
    or one item of ``podman image inspect``'s JSON list)."""
    if not isinstance(item, dict) or not isinstance(item.get("Id"), str):
        raise ValueError("no image Id in the inspect output")
    digests = item.get("RepoDigests") or []
    config = item.get("Config") or {}
    labels = (config.get("Labels") if isinstance(config, dict) else None) or {}
    return EngineImage(
        item["Id"],
        tuple(d for d in digests if isinstance(d, str)),
        {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
    )


def parse_engine_inspect(stdout: str) -> EngineImage:
    """The image from ``podman image inspect REF`` (a JSON list)."""
    data = json.loads(stdout)
    return image_from_inspect(data[0] if isinstance(data, list) and data else data)


def repository_of(ref: str) -> str:
    """``host:5000/a/b:tag@sha256:..`` -> ``host:5000/a/b``."""
    name = ref.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def pick_digest(ref: str, repo_digests: Sequence[str]) -> str | None:
    """The ``sha256:...`` of ``ref``'s repository among an image's RepoDigests."""
    wanted = repository_of(ref)
    pairs = [d.split("@", 1) for d in repo_digests if "@" in d]
    for repo, digest in pairs:
        if repo == wanted or repo.endswith("/" + wanted) or wanted.endswith("/" + repo):
            return digest
    return pairs[0][1] if len(pairs) == 1 else digest_in_ref(ref)


def pulled_digest(ref: str, image: EngineImage, pull_stdout: str) -> str | None:
    """The digest of a pulled image: from its RepoDigests, else the pull's ``Digest:`` line."""
    digest_line = _DIGEST_LINE.search(pull_stdout)
    return pick_digest(ref, image.repo_digests) or (digest_line.group(1) if digest_line else None)


def engine_pull_status(stdout: str) -> PullStatus:
    """What a pull says it did, from its ``Status:`` line (docker's API, podman's CLI)."""
    if re.search(r"^Status: Image is up to date", stdout, re.MULTILINE):
        return "up to date"
    if re.search(r"^Status: Downloaded newer image", stdout, re.MULTILINE):
        return "downloaded"
    return "unknown"


def pull_outcome(before: EngineImage | None, after: EngineImage, said: str) -> PullStatus:
    """What a pull did: the engine's own ``Status:`` line, else (podman prints none) whether the
    image it holds changed: the same image id before and after is "up to date"."""
    status = engine_pull_status(said)
    if status != "unknown":
        return status
    return "up to date" if before is not None and before.id == after.id else "downloaded"
