"""``ctrain pull --runtime pyxis``: ``enroot import`` of a registry image into one squashfs file
in ctrain's cache, which every pyxis step then runs (``--container-image=FILE.sqsh``) instead of
importing the image again on each node.

enroot's command is ``enroot import -o FILE URI`` with ``URI`` in its own form,
``docker://[USER@][REGISTRY#]IMAGE[:TAG]`` (or ``dockerd://IMAGE[:TAG]``); it refuses an output file
that exists (it has no ``--force``). So the import writes to a fresh temporary name beside the
target, ``.<name>.pull-<token>``, which is checked (squashfs superblock) and renamed over the target
by the pull steps every store shares (images.stores.base): a killed import leaves the previous file
whole, and the next pull removes the leftover. The same reuse decision and record as a SIF pull
(images.record): pulling an up-to-date file again downloads nothing. enroot's own paths (its layer
cache, data, runtime and temporary directories) are ``cachedir.enroot_env``'s, never $HOME. The
facts, with their sources: docs/pyxis-facts.md, "enroot import".

Pure: the URI, names, argv, the superblock check, the plan. Effectful: ``EnrootStore.fetch``.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from ctrain.errors import ConfigError, ExternalToolError, SpecError
from ctrain.images import cachedir
from ctrain.images.record import (
    IMAGES_DIR,
    Action,
    Sidecar,
    TargetState,
    decide_reuse,
    new_sidecar,
    read_sidecar,
)
from ctrain.images.stores.base import UNTOUCHED, FileStore, PullAsk, Pulling, PullPlan, run_tool
from ctrain.names import PYXIS
from ctrain.references import enroot_image, is_file_reference, safe_name, split_reference
from ctrain.util import proc

ENROOT = "enroot"
SUFFIX = ".sqsh"
# The squashfs 4.0 superblock (squashfs-tools, squashfs_fs.h), little-endian: magic "hsqs",
# inode count, modification time, block size, fragment count (uint32 each); compression, block
# log, flags, id count, major and minor version (uint16 each); root inode and bytes used (uint64).
SUPERBLOCK = struct.Struct("<4sIIII6H2Q")
SQUASHFS_MAGIC = b"hsqs"
SQUASHFS_VERSION = (4, 0)


def import_uri(ref: str) -> str:
    """``ref`` as enroot import takes it: ``docker://REGISTRY/REPO:TAG`` becomes
    ``docker://REGISTRY#REPO:TAG`` (container.pyxis' rule), ``docker-daemon://`` ``dockerd://``;
    enroot's own ``REGISTRY#REPO:TAG`` gets its ``docker://``."""
    text = ref.strip()
    if not text or any(ch.isspace() or not ch.isprintable() for ch in text):
        raise ConfigError(
            f"image reference {ref!r} is empty or holds spaces or control characters",
            "name one: ctrain pull --runtime pyxis docker://REGISTRY/REPO:TAG",
        )
    if split_reference(text) is None and ("#" not in text or is_file_reference(text)):
        raise ConfigError(
            f"{text} is not a registry image for enroot import",
            f"write docker://{text}, or give the squashfs file to ctrain exec as it is",
        )
    try:
        image = enroot_image(text, "/")
    except SpecError as exc:
        raise ConfigError(exc.message, exc.fix) from None
    return image if "://" in image else f"docker://{image}"


def import_argv(program: str, output: Path, uri: str) -> list[str]:
    """enroot's documented form: ``enroot import [-a ARCH] [-o OUTPUT] URI`` (host's arch)."""
    return [program, "import", "-o", str(output), uri]


def squashfs_problem(header: bytes, file_size: int) -> str | None:
    """Why these first bytes of a ``file_size``-byte file are not a whole squashfs image."""
    if len(header) < SUPERBLOCK.size:
        return f"{file_size} bytes, shorter than a squashfs superblock ({SUPERBLOCK.size} bytes)"
    magic, *_, major, minor, _, used = SUPERBLOCK.unpack_from(header)
    if magic != SQUASHFS_MAGIC:
        return "no squashfs magic (hsqs) at byte 0: not a squashfs image"
    if (major, minor) != SQUASHFS_VERSION:
        return f"squashfs version {major}.{minor}, not 4.0"
    if used > file_size:
        return f"truncated: its superblock counts {used} bytes, the file has {file_size}"
    return None


def squashfs_state(target: Path) -> TargetState:
    """What is at ``target``: nothing, or a file and what is wrong with it as a squashfs image."""
    try:
        with target.open("rb") as handle:
            header = handle.read(SUPERBLOCK.size)
            size = os.fstat(handle.fileno()).st_size
    except FileNotFoundError:
        return TargetState(False)
    except IsADirectoryError:
        raise ConfigError(f"{target} exists and is not a file", "remove it") from None
    except OSError as exc:
        return TargetState(True, None, f"cannot read it ({exc.strerror})")
    return TargetState(True, size, squashfs_problem(header, size))


def cached_file(cache_root: Path, uri: str) -> Path:
    """``CACHE/images/<name>.sqsh`` for enroot's ``uri``."""
    return cache_root / IMAGES_DIR / (safe_name(uri) + SUFFIX)


class EnrootStore(FileStore):
    def plan(self, asked: PullAsk) -> PullPlan:
        """``CACHE/images/<name>.sqsh``, its record and lock beside it."""
        if asked.output is not None:
            raise ConfigError(
                "-o/--output is not supported with --runtime pyxis: the file goes to ctrain's "
                "cache",
                "drop -o; ctrain resolve --runtime pyxis prints where the file is",
            )
        uri = import_uri(asked.ref)
        target = cached_file(asked.cache_root, uri)
        return PullPlan.beside(asked, uri, target, runtime=PYXIS, program=ENROOT)

    def pull_env(self, plan: PullPlan, cache: cachedir.CacheChoice, tmpdir: Path) -> dict[str, str]:
        return cachedir.enroot_env(cache, tmpdir)

    def decision(self, plan: PullPlan, target: Path) -> tuple[Sidecar | None, Action, str]:
        sidecar = read_sidecar(plan.record)
        action, reason = decide_reuse(
            sidecar, plan.ref, squashfs_state(target), plan.owned, plan.force
        )
        return sidecar, action, reason

    def starting(self, plan: PullPlan, target: Path, reason: str) -> str:
        return f"importing {plan.ref} into {target} with enroot ({reason})"

    def fetch(self, plan: PullPlan, temp: Path, run: Pulling, temp_space: Path) -> int:
        """enroot import into ``temp`` (which does not exist: enroot refuses an existing file),
        its paths (layer cache, data, temporary space) ``cachedir.enroot_env``'s."""
        env = {**run.environ, **cachedir.enroot_env(run.cache, temp_space)}
        program = proc.which(plan.program, env)
        if program is None:
            raise ExternalToolError(
                f"{plan.program} is not on PATH here, so ctrain cannot import {plan.ref}",
                "run ctrain pull --runtime pyxis on a node with enroot (the same cache), or give "
                "the image as REGISTRY#REPO:TAG to let pyxis import it on each node",
            )
        run_tool(
            import_argv(program, temp, plan.ref),
            env,
            f"enroot import {plan.ref}",
            "check the reference, the network and enroot's credentials "
            "($ENROOT_CONFIG_PATH/.credentials; ENROOT_ALLOW_HTTP=yes for an HTTP registry)",
            lambda line: None,  # its output only in the error message
        )
        state = squashfs_state(temp)
        if state.problem or state.size is None:
            raise ExternalToolError(
                f"enroot import wrote no whole squashfs image for {plan.ref}: "
                + (state.problem or "no file"),
                f"run the pull again; if it keeps failing, run enroot import by hand; {UNTOUCHED}",
            )
        return state.size

    def record(self, plan: PullPlan, target: Path, size: int | None) -> Sidecar:
        return new_sidecar(plan.ref, plan.runtime, None, size=size, target=str(target))
