"""references.py: enroot's form of every image reference pyxis and enroot import take, and
its refusals in full (facts: docs/pyxis-facts.md)."""

from __future__ import annotations

import pytest

from ctrain.errors import SpecError
from ctrain.references import enroot_image


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("docker://nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
        ("docker://127.0.0.1:5000/ctrain:ci-cpu", "127.0.0.1:5000#ctrain:ci-cpu"),
        ("docker://localhost/lab/ctrain:1", "localhost#lab/ctrain:1"),
        ("docker://ubuntu:24.04", "ubuntu:24.04"),
        ("docker://lab/ctrain:1", "lab/ctrain:1"),  # Docker Hub: no registry part
        ("docker-daemon://ctrain:ci-cpu", "dockerd://ctrain:ci-cpu"),
        ("docker-daemon:ctrain:ci-cpu", "dockerd://ctrain:ci-cpu"),
        ("nvcr.io#nvidia/pytorch:24.01-py3", "nvcr.io#nvidia/pytorch:24.01-py3"),
        ("/scratch/ctrain.sqsh", "/scratch/ctrain.sqsh"),
        ("images/ctrain.sqsh", "/work/images/ctrain.sqsh"),
        ("./a#b.sqsh", "/work/a#b.sqsh"),
    ],
)
def test_enroot_image(given: str, expected: str) -> None:
    assert enroot_image(given, "/work") == expected


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("oras://ghcr.io/lab/ctrain:1", "docker:// and docker-daemon://"),
        ("library://lab/ctrain", "docker:// and docker-daemon://"),
        ("/scratch/ctrain.sif", "not the SIF file"),
    ],
)
def test_enroot_image_refuses(given: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        enroot_image(given, "/work")


@pytest.mark.parametrize(
    ("image", "message", "fix"),
    [
        (
            "oras://ghcr.io/lab/c:1",
            "pyxis cannot import oras://ghcr.io/lab/c:1: enroot takes docker:// and "
            "docker-daemon:// images",
            "give a docker:// reference or a squashfs file (enroot import -o FILE.sqsh docker://...)",
        ),
        (
            "/s/c.sif",
            "pyxis runs squashfs files made by enroot, not the SIF file /s/c.sif",
            "give the docker:// reference, or a file made by enroot import -o FILE.sqsh",
        ),
    ],
)
def test_enroot_image_refusals(image: str, message: str, fix: str) -> None:
    with pytest.raises(SpecError) as caught:
        enroot_image(image, "/w")
    assert (caught.value.message, caught.value.fix) == (message, fix)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("docker://registry.lab:5000/a/b#c:1", "registry.lab:5000/a/b#c:1"),
        ("docker://lab.io/team/a/b:1", "lab.io#team/a/b:1"),
        ("docker://registry:5000/lab/c:1", "registry:5000#lab/c:1"),  # a port, no dot
        ("docker://ctrain", "ctrain"),
        ("docker-daemon://a/b:1", "dockerd://a/b:1"),
        ("a#b.sqsh", "a#b.sqsh"),
        ("/s/a#b.sqsh", "/s/a#b.sqsh"),
        ("/s//x/./c.sqsh", "/s//x/./c.sqsh"),  # absolute: as written, not normalised
        ("./c.sqsh", "/w/c.sqsh"),
        ("c.sif.sqsh", "/w/c.sif.sqsh"),
    ],
)
def test_enroot_image_more_forms(given: str, expected: str) -> None:
    assert enroot_image(given, "/w") == expected
