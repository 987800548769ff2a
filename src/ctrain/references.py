"""Image references: the one home of how ctrain reads and writes them, shared by the images it
pulls (images/) and the containers it runs (container/). Pure.

- Schemes: ``SCHEME://REST`` references Apptainer fetches itself, and which operations take
  each; the form each Apptainer operation takes (``runtime_reference``); a registry on the
  loopback interface (plain HTTP).
- A pull's reference: checked for a runtime (``check_ref``), made into a file name
  (``safe_name``), an archive's file (``archive_path``), a digest pin (``digest_in_ref``).
- enroot's own form, which pyxis takes (docs/pyxis-facts.md): a registry image
  ``REGISTRY#REPO:TAG``, a Docker daemon's ``dockerd://NAME:TAG``, and a reference starting
  with ``.`` or ``/`` for a squashfs file.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path, PurePosixPath
from typing import Literal

from ctrain.errors import ConfigError, SpecError
from ctrain.names import SIF_RUNTIMES

# ---- schemes --------------------------------------------------------------------------------

Operation = Literal["pull", "exec", "build"]
_EVERY: frozenset[Operation] = frozenset(("pull", "exec", "build"))

# SCHEME://... references apptainer and singularity fetch themselves, and the ctrain operations
# that accept each (anything else is a local file). Apptainer builds from no web address.
SCHEMES: dict[str, frozenset[Operation]] = {
    "docker": _EVERY,
    "docker-daemon": _EVERY,
    "docker-archive": _EVERY,
    "oci-archive": _EVERY,
    "oras": _EVERY,
    "library": _EVERY,
    "shub": _EVERY,
    "http": frozenset(("pull", "exec")),
    "https": frozenset(("pull", "exec")),
}
# Schemes whose references apptainer's pull, exec and run take as SCHEME:REST (one colon;
# `docker-daemon://` is "invalid reference format" there, `docker-archive://a.tar` is read as
# `a.tar` with the `//` dropped), while its build takes both forms. ctrain accepts both forms
# everywhere and hands each operation the form it takes.
ONE_COLON = ("docker-daemon", "docker-archive", "oci-archive")
# Schemes whose REST is a file on this machine (`docker save -o`, `podman save --format
# oci-archive`), not a name a daemon or registry resolves: relative to the working directory.
ARCHIVE_SCHEMES = ("docker-archive", "oci-archive")
ENGINE_SCHEME = "docker"  # the one scheme docker and podman accept, and strip
# A registry on the loopback interface (127.0.0.1:5000, localhost:5000, [::1]:5000) is reached
# over plain HTTP, as Docker's engine does by default: such a local registry rarely has a
# certificate. Apptainer needs --no-https for it ("server gave HTTP response to HTTPS client").
PLAIN_HTTP_SCHEMES = ("docker", "oras")


def schemes(operation: Operation) -> tuple[str, ...]:
    """The schemes ``operation`` accepts, in the table's order."""
    return tuple(scheme for scheme, accepted in SCHEMES.items() if operation in accepted)


def split_reference(reference: str) -> tuple[str, str] | None:
    """``(scheme, rest)`` of ``SCHEME://REST`` (or ``SCHEME:REST`` for ONE_COLON), else None."""
    scheme, sep, rest = reference.partition("://")
    if sep:
        return scheme, rest
    scheme, sep, rest = reference.partition(":")
    return (scheme, rest) if sep and scheme in ONE_COLON else None


def is_remote(reference: str, operation: Operation) -> bool:
    """Whether ``reference`` names a remote image with a scheme ``operation`` accepts."""
    split = split_reference(reference)
    return split is not None and operation in SCHEMES.get(split[0], frozenset())


def loopback_registry(reference: str) -> bool:
    """Whether ``reference`` is ``docker://`` or ``oras://`` of a registry on this machine's
    loopback interface. A first path part is a registry only when a path follows it."""
    split = split_reference(reference)
    if split is None or split[0] not in PLAIN_HTTP_SCHEMES or "/" not in split[1]:
        return False
    host = split[1].split("/", 1)[0]
    name = host[1 : host.find("]")] if host.startswith("[") else host.partition(":")[0]
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def runtime_reference(reference: str, operation: Operation) -> str:
    """``reference`` in the form apptainer's ``operation`` takes: ``docker-daemon://NAME:TAG``
    becomes ``docker-daemon:NAME:TAG`` for pull and exec (and run, shell); build keeps it."""
    split = split_reference(reference)
    if split is None or split[0] not in ONE_COLON or operation == "build":
        return reference
    return f"{split[0]}:{split[1]}"


# ---- a pull's reference ---------------------------------------------------------------------

_ENGINE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")
_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})\Z")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def check_ref(ref: str, runtime: str) -> str:
    """The reference to give ``runtime``, or a ConfigError saying how to write it.

    SIF runtimes need a scheme (``docker://``, ``oras://``, ...); docker and podman take
    ``REPO[:TAG][@DIGEST]`` and accept (and strip) ``docker://``."""
    text = ref.strip()
    if not text:
        raise ConfigError(
            "no image reference given",
            "name one (ctrain pull docker://REPO:TAG) or set CTRAIN_IMAGE",
        )
    split = split_reference(text) if runtime in SIF_RUNTIMES else None
    archive = split is not None and split[0] in ARCHIVE_SCHEMES  # a path: spaces are fine
    if any((ch.isspace() and not archive) or not ch.isprintable() for ch in text):
        raise ConfigError(
            f"image reference {ref!r} contains spaces or control characters",
            "give the reference as the registry shows it, without spaces",
        )
    if runtime in SIF_RUNTIMES:
        if split is None:
            raise ConfigError(
                f"image reference {text!r} has no scheme",
                f"write docker://{text} (or another scheme: "
                + ", ".join(
                    s + (":" if s in ONE_COLON else "://") for s in schemes("pull") if s != "docker"
                )
                + ")",
            )
        if not is_remote(text, "pull") or not split[1]:
            raise ConfigError(
                f"{runtime} cannot pull {text!r}",
                "use one of " + ", ".join(f"{s}://" for s in schemes("pull")),
            )
        return runtime_reference(text, "pull")
    scheme, sep, rest = text.partition("://")
    if sep:
        if scheme != ENGINE_SCHEME:
            raise ConfigError(
                f"{runtime} pulls registry images, not {scheme}:// references ({text})",
                "use --runtime apptainer for it, or give REPO:TAG",
            )
        text = rest
    if not _ENGINE_REF.match(text):
        raise ConfigError(
            f"{text!r} is not a {runtime} image reference", "write it as REPO[:TAG][@sha256:DIGEST]"
        )
    return text


def safe_name(ref: str) -> str:
    """A file name for ``ref``: scheme and path joined by ``_``, long names shortened by hash."""
    scheme, sep, rest = ref.partition("://")
    base = _UNSAFE.sub("_", f"{scheme}_{rest}" if sep else ref).strip("._-") or "image"
    if len(base) > 120:
        import hashlib  # here: every `ctrain exec` imports this module, few names are this long

        base = base[:100] + "-" + hashlib.sha256(ref.encode()).hexdigest()[:12]
    return base


def image_filename(ref: str) -> str:
    """``docker://ghcr.io/ctrain/ctrain:0.1.0-gpu`` ->
    ``docker_ghcr.io_ctrain_ctrain_0.1.0-gpu.sif``."""
    return safe_name(ref) + ".sif"


def archive_path(ref: str) -> Path | None:
    """The file an archive reference names (``docker-archive:``, ``oci-archive:``), else None."""
    split = split_reference(ref)
    if split is None or split[0] not in ARCHIVE_SCHEMES:
        return None
    return Path(split[1]).expanduser().absolute()


def digest_in_ref(ref: str) -> str | None:
    """``sha256:...`` when the reference is pinned by digest (``...@sha256:<64 hex>``)."""
    pinned = _DIGEST.search(ref)
    return pinned.group(1) if pinned else None


# ---- enroot's form (pyxis) ------------------------------------------------------------------

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
