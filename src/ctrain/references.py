"""Image references in a tool's own form, shared by the images it pulls (images/) and the
containers it runs (container/): enroot's, which pyxis takes.

enroot (and so pyxis) writes a registry image ``REGISTRY#REPO:TAG``, a Docker daemon's
``dockerd://NAME:TAG``, and takes a reference starting with ``.`` or ``/`` for a squashfs file
(docs/pyxis-facts.md). Pure.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from ctrain.errors import SpecError
from ctrain.names import ENGINE_SCHEME, split_reference

DAEMON_SCHEMES = {"docker-daemon": "dockerd"}  # ctrain's scheme -> enroot's


def is_file_reference(image: str) -> bool:
    """pyxis' rule: an image starting with ``.`` or ``/`` is a squashfs file."""
    return image.startswith((".", "/"))


def enroot_image(image: str, cwd: str) -> str:
    """``image`` as pyxis takes it (see the module's docstring); ``cwd`` makes a relative file
    absolute. A ``REGISTRY#REPO:TAG`` reference is already enroot's."""
    split = split_reference(image)
    if split is not None:
        scheme, rest = split
        if scheme == ENGINE_SCHEME:
            return _registry_form(rest)
        if scheme in DAEMON_SCHEMES:
            return f"{DAEMON_SCHEMES[scheme]}://{rest}"
        raise SpecError(
            f"pyxis cannot import {image}: enroot takes docker:// and docker-daemon:// images",
            "give a docker:// reference or a squashfs file (enroot import -o FILE.sqsh docker://...)",
        )
    if "#" in image and not is_file_reference(image):
        return image
    if image.endswith(".sif"):
        raise SpecError(
            f"pyxis runs squashfs files made by enroot, not the SIF file {image}",
            "give the docker:// reference, or a file made by enroot import -o FILE.sqsh",
        )
    return str(PurePosixPath(cwd, image)) if not image.startswith("/") else image


def _registry_form(rest: str) -> str:
    """``REGISTRY/REPO:TAG`` -> ``REGISTRY#REPO:TAG``; the first part is a registry when it
    holds a dot or a port, or is localhost (Docker's rule); ``REPO:TAG`` and ``REGISTRY#...``
    stay."""
    if "#" in rest:  # enroot's form already
        return rest
    first, sep, repo = rest.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{repo}"
    return rest
