"""references.py: enroot's form of every image reference pyxis and enroot import take, and
its refusals in full (facts: docs/pyxis-facts.md); a pull's reference checked for each runtime
(its refusals in full), split at its scheme, and made into a file name."""

from __future__ import annotations

import pytest

from ctrain.errors import SpecError
from ctrain.references import (
    check_ref,
    enroot_image,
    loopback_registry,
    safe_name,
    split_reference,
)
from tests.support.helpers import refusal


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


NO_REF = (
    "no image reference given",
    "name one (ctrain pull docker://REPO:TAG) or set CTRAIN_IMAGE",
)
SPACED = "image reference {!r} contains spaces or control characters"
SPACES = "give the reference as the registry shows it, without spaces"
PULLED = (
    "docker://, docker-daemon://, docker-archive://, oci-archive://, oras://, library://, shub://, "
    "http://, https://"
)
OTHERS = (
    "docker-daemon:, docker-archive:, oci-archive:, oras://, library://, shub://, http://, https://"
)
ENGINE_FORM = "write it as REPO[:TAG][@sha256:DIGEST]"


@pytest.mark.parametrize(
    ("ref", "runtime", "message", "fix"),
    [
        ("", "apptainer", *NO_REF),
        (" \t", "docker", *NO_REF),
        ("docker://a b", "apptainer", SPACED.format("docker://a b"), SPACES),
        # a path with spaces is an archive's, for apptainer alone: docker takes no archive
        ("docker-archive:a b.tar", "docker", SPACED.format("docker-archive:a b.tar"), SPACES),
        (
            "ghcr.io/a/b:1",
            "apptainer",
            "image reference 'ghcr.io/a/b:1' has no scheme",
            f"write docker://ghcr.io/a/b:1 (or another scheme: {OTHERS})",
        ),
        ("ftp://x/y", "singularity", "singularity cannot pull 'ftp://x/y'", f"use one of {PULLED}"),
        (
            "oras://r/x://y",  # the scheme is what precedes the first ://
            "docker",
            "docker pulls registry images, not oras:// references (oras://r/x://y)",
            "use --runtime apptainer for it, or give REPO:TAG",
        ),
        ("-rm", "podman", "'-rm' is not a podman image reference", ENGINE_FORM),
    ],
)
def test_check_ref_refusals(ref: str, runtime: str, message: str, fix: str) -> None:
    assert refusal(lambda: check_ref(ref, runtime)) == (message, fix)


@pytest.mark.parametrize(
    ("reference", "split"),
    [
        ("docker://a/b:1", ("docker", "a/b:1")),
        ("https://h/i.sif?from=docker://x", ("https", "h/i.sif?from=docker://x")),
        ("docker-daemon:a:1", ("docker-daemon", "a:1")),
        ("docker:a/b:1", None),  # one colon: the archive and daemon schemes alone
        ("a/b:1", None),
    ],
)
def test_split_reference(reference: str, split: tuple[str, str] | None) -> None:
    assert split_reference(reference) == split


@pytest.mark.parametrize(
    ("reference", "plain_http"),
    [
        ("docker://localhost/lab/img:1", True),  # the registry is the first part of the path
        ("docker://ghcr.io/localhost/img:1", False),
    ],
)
def test_the_registry_is_the_first_part(reference: str, plain_http: bool) -> None:
    assert loopback_registry(reference) is plain_http


LONG = "docker://" + "x" * 113  # docker_ and 113 x: 120 characters


@pytest.mark.parametrize(
    ("ref", "name"),
    [
        ("docker://[::1]:5000/a:1", "docker__1_5000_a_1"),  # scheme, _, then the rest's own
        ("https://h/ctrain/latest/", "https_h_ctrain_latest"),
        ("oras://ghcr.io/lab/ctrain:LINUX", "oras_ghcr.io_lab_ctrain_LINUX"),
        ("lab/ctrain:1", "lab_ctrain_1"),
        ("-._", "image"),  # nothing left
        (LONG, "docker_" + "x" * 113),
        (LONG + "y", "docker_" + "x" * 93 + "-a7b88f4f176b"),  # 100, -, sha256's first 12
    ],
)
def test_safe_name(ref: str, name: str) -> None:
    assert safe_name(ref) == name
