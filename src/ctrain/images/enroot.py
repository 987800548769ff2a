"""``ctrain pull --runtime pyxis``: ``enroot import`` of a registry image into one squashfs file
in ctrain's cache, which every pyxis step then runs (``--container-image=FILE.sqsh``) instead of
importing the image again on each node.

enroot's command is ``enroot import -o FILE URI`` with ``URI`` in its own form,
``docker://[USER@][REGISTRY#]IMAGE[:TAG]`` (or ``dockerd://IMAGE[:TAG]``); it refuses an output
file that exists (it has no ``--force``). So the import writes to a fresh temporary name beside
the target, ``.<name>.pull-<token>``, which is checked (squashfs superblock) and renamed over the
target, as the SIF pulls are (images.pull): a killed import leaves the previous file whole, and
the next pull removes the leftover. The same lock, sidecar record and reuse decision as a SIF
pull (images.sif): pulling an up-to-date file again downloads nothing. enroot's own paths (its
layer cache, data, runtime and temporary directories) are ``cachedir.enroot_env``'s, never $HOME.
The facts, with their sources: docs/pyxis-facts.md, "enroot import".

Pure: the URI, names, argv, the superblock check, the plan. Effectful: ``import_image``.
"""

from __future__ import annotations

import os
import struct
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path

from ctrain.container.pyxis import enroot_image, is_file_reference
from ctrain.errors import ConfigError, ExternalToolError, Interrupted, SpecError
from ctrain.images import cachedir
from ctrain.images.pull import (
    TAIL_LINES,
    TEMP_TAG,
    PullPlan,
    PullResult,
    pull_lock,
    safe_name,
)
from ctrain.images.sif import (
    IMAGES_DIR,
    Action,
    Sidecar,
    TargetState,
    decide,
    lock_of,
    new_sidecar,
    read_sidecar,
    sidecar_of,
)
from ctrain.names import PYXIS, split_reference
from ctrain.util import fs, proc

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


def target_state(target: Path) -> TargetState:
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


def plan_import(ref: str, output: str | None, cache_root: Path, force: bool) -> PullPlan:
    """Where an import goes: ``CACHE/images/<name>.sqsh``, its sidecar and lock beside it."""
    if output is not None:
        raise ConfigError(
            "-o/--output is not supported with --runtime pyxis: the file goes to ctrain's cache",
            "drop -o; ctrain resolve --runtime pyxis prints where the file is",
        )
    uri = import_uri(ref)
    target = cached_file(cache_root, uri)
    return PullPlan(uri, PYXIS, ENROOT, target, sidecar_of(target), lock_of(target), True, force)


def decide_import(plan: PullPlan, target: Path) -> tuple[Sidecar | None, Action, str]:
    sidecar = read_sidecar(plan.record)
    action, reason = decide(sidecar, plan.ref, target_state(target), plan.owned, plan.force)
    return sidecar, action, reason


def import_image(
    plan: PullPlan,
    cache: cachedir.CacheChoice,
    environ: Mapping[str, str],
    min_free_gb: int,
    say: Callable[[str], None],
    *,
    tmpdir: Path | None = None,
) -> PullResult:
    """Run the import ``plan`` under its lock (a concurrent import of the same file waits, then
    finds it up to date); ``tmpdir``: enroot's temporary space (default $TMPDIR, else /tmp)."""
    target = plan.target or cached_file(cache.path, plan.ref)  # plan_import always sets it
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with pull_lock(plan, str(target), environ, say):
        for leftover in fs.remove_leftovers(target.parent, fs.temp_prefix(target, TEMP_TAG)):
            say(f"removed {leftover.name}, left by an interrupted pull")
        sidecar, action, reason = decide_import(plan, target)
        if action == "reuse" and sidecar is not None:
            return PullResult(str(target), False, sidecar, reason)
        fs.check_free(target.parent, min_free_gb)
        temp_space = tmpdir or cachedir.node_local_tmp(environ)
        cachedir.check_tmpdir(temp_space, min_free_gb)
        env = {**environ, **cachedir.enroot_env(cache, temp_space)}
        say(f"importing {plan.ref} into {target} with enroot ({reason})")
        with cachedir.in_use(cache):
            return _import(plan, target, env, reason)


def _import(plan: PullPlan, target: Path, env: Mapping[str, str], reason: str) -> PullResult:
    """Import into a fresh temporary name, check it, rename it over ``target``, record it."""
    program = proc.which(plan.program, env)
    if program is None:
        raise ExternalToolError(
            f"{plan.program} is not on PATH here, so ctrain cannot import {plan.ref}",
            "run ctrain pull --runtime pyxis on a node with enroot (the same cache), or give "
            "the image as REGISTRY#REPO:TAG to let pyxis import it on each node",
        )
    try:
        with fs.atomic(target, fs.temp_beside(target, TEMP_TAG)) as temp:
            size = _run_import(plan, program, temp, env)
            plan.record.unlink(missing_ok=True)  # never a record of another file
        new = new_sidecar(plan.ref, plan.runtime, None, size=size, target=str(target))
        fs.write_text(plan.record, new.to_json())
    except OSError as exc:
        raise fs.write_error(exc, target, "free some space in the cache") from exc
    return PullResult(str(target), True, new, reason)


def _run_import(plan: PullPlan, program: str, temp: Path, env: Mapping[str, str]) -> int:
    """enroot import into ``temp`` (which does not exist: enroot refuses an existing file)."""
    untouched = "the previous image is untouched"
    said: deque[str] = deque(maxlen=TAIL_LINES)
    code, stopped = proc.stream_forwarding(import_argv(program, temp, plan.ref), env, said.append)
    if stopped is not None:
        raise Interrupted(f"pull stopped by {stopped}; {untouched}", "run the same pull again")
    if code != 0:
        raise ExternalToolError(
            f"enroot import {plan.ref} failed: "
            + (proc.last_line("".join(said)) or f"exit code {code}"),
            "check the reference, the network and enroot's credentials "
            f"($ENROOT_CONFIG_PATH/.credentials; ENROOT_ALLOW_HTTP=yes for an HTTP registry); "
            f"{untouched}",
        )
    state = target_state(temp)
    if state.problem or state.size is None:
        raise ExternalToolError(
            f"enroot import wrote no whole squashfs image for {plan.ref}: "
            + (state.problem or "no file"),
            f"run the pull again; if it keeps failing, run enroot import by hand; {untouched}",
        )
    return state.size
