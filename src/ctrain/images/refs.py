"""Image references as a pull takes them: checked for a runtime, made into file names, and an
archive's path made absolute with its stamp. Pure, except ``archive_ref``'s ``stat``.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ctrain.errors import ConfigError
from ctrain.images.sif import archive_stamp
from ctrain.names import (
    ARCHIVE_SCHEMES,
    ENGINE_SCHEME,
    ONE_COLON,
    SIF_RUNTIMES,
    is_remote,
    runtime_reference,
    schemes,
    split_reference,
)

_ENGINE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")
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


def archive_ref(ref: str) -> tuple[str, str | None]:
    """``ref`` with an archive's path made absolute (two directories' ``img.tar`` are two
    images), and the archive's stamp now; other references as they are, without a stamp. An
    archive that is not here (a compute node may not see it) has no stamp: a pull of it is
    trusted as a registry's is offline, and a new pull is refused (images.sif_pull)."""
    path = archive_path(ref)
    if path is None:
        return ref, None
    scheme = ref.partition(":")[0]
    if ":" in str(path):
        raise ConfigError(
            f"{scheme} {path}: apptainer reads what follows a ':' as an image inside the archive",
            "link the archive under a path without ':' (ln -s) and give that",
        )
    try:
        info = path.stat()
    except FileNotFoundError:
        return f"{scheme}:{path}", None
    except OSError as exc:
        raise ConfigError(f"{scheme} {path}: {exc.strerror}", "give a readable archive") from None
    if not path.is_file():
        raise ConfigError(f"{scheme} {path} is not a file", "give the archive file's path")
    return f"{scheme}:{path}", archive_stamp(info.st_size, info.st_mtime_ns, info.st_ino)
