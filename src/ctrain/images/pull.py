"""``ctrain pull``: check the reference, plan where the image goes, pull it under a lock.

A SIF pull (apptainer, singularity) runs ``<runtime> pull --disable-cache`` into
``.<name>.pull-<token>`` next to the target (stored once, not also in Apptainer's cache),
checks the SIF header and ``<runtime> inspect``, then renames over the target (``util.fs``): the
target never holds a partial file, and a pull killed at any moment leaves the previous one
intact. The next pull of the same target removes such leftovers. Apptainer's own temporary
space is node-local (``cachedir.build_tmpdir``); SIGTERM/SIGINT/SIGHUP are passed to it and
ctrain waits while it removes its ``build-temp-*`` (``proc.stream_forwarding``). While it
runs, the pull holds ``cachedir.in_use`` so ``cache clean`` leaves its work alone. Whether a
target is reused, pulled again or refused, and the sidecar record written beside it, are
``images.sif``'s; what docker's output says is ``images.engine``'s.

A Docker pull goes through the engine's API (``images.docker_api``: the Docker SDK), its
layers' progress to the caller; a Podman pull is ``podman pull REF`` and ``podman image inspect
REF``. The image lives in the engine's store, the sidecar in ``CACHE/docker/``.

Concurrent pulls of one target serialise on ``flock(<target>.lock)``: the first downloads, the
others wait, then find the target up to date and reuse it.

Pure: reference checks, names, argv builders, parsers of docker's output, the plan.
Effectful: ``pull`` (processes through ``ctrain.util.proc`` only).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ctrain.errors import ConfigError, ExternalToolError, Interrupted
from ctrain.images import cachedir
from ctrain.images.engine import (
    digest_in_ref,
)
from ctrain.images.sif import (
    ENGINE_DIR,
    IMAGES_DIR,
    Action,
    Sidecar,
    archive_stamp,
    check_sif,
    decide,
    lock_of,
    new_sidecar,
    read_sidecar,
    sidecar_of,
    sif_inspect_argv,
    sif_pull_argv,
    target_state,
)
from ctrain.names import (
    ARCHIVE_SCHEMES,
    CHARLIECLOUD,
    CONTAINER_RUNTIMES,
    ENGINE_RUNTIMES,
    ENGINE_SCHEME,
    ONE_COLON,
    PYXIS,
    SIF_RUNTIMES,
    is_remote,
    runtime_reference,
    schemes,
    split_reference,
)
from ctrain.util import fs, locks, proc

if TYPE_CHECKING:
    from ctrain.util.progress import Event

PULL_TIMEOUT = None  # a large image on a slow link takes as long as it takes
INSPECT_TIMEOUT = 300.0
TAIL_LINES = 40  # of apptainer pull's output, kept for the error message
TEMP_TAG = "pull"  # temporary files are .<name>.pull-<token>

_ENGINE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]*\Z")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


# ---------------------------------------------------------------------------------------------
# References and names


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


@contextlib.contextmanager
def _signals_as_errors() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP/SIGINT into Interrupted, so the child is killed and the temporary
    file removed by the ``finally`` blocks (subprocess.run kills its child on any exception)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(
            f"pull stopped by {signal.Signals(signum).name}; the previous image is untouched",
            "run the same ctrain pull again",
        )

    wanted = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {sig: signal.signal(sig, handler) for sig in wanted}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


# ---------------------------------------------------------------------------------------------
# Plans and pulls


@dataclass(frozen=True)
class PullPlan:
    ref: str
    runtime: str  # apptainer, singularity, docker or podman
    program: str
    target: Path | None  # the SIF file; None for docker/podman (the engine's store)
    record: Path  # the sidecar
    lock: Path
    owned: bool  # the target is in ctrain's cache
    force: bool
    stamp: str | None = None  # the source archive's (sif.archive_stamp), for archive schemes


@dataclass(frozen=True)
class PullResult:
    where: str  # the SIF path, or the engine reference
    downloaded: bool
    sidecar: Sidecar
    reason: str


def plan_pull(
    ref: str,
    runtime: str,
    program: str,
    output: str | None,
    cache_root: Path,
    force: bool,
    is_dir: Callable[[Path], bool],
) -> PullPlan:
    """Where a pull goes, checked before anything is written."""
    if runtime == PYXIS:  # enroot import into a squashfs file (imported here: it imports us)
        from ctrain.images.enroot import plan_import

        return plan_import(ref, output, cache_root, force)
    if runtime == CHARLIECLOUD:
        from ctrain.images import charliecloud

        return charliecloud.plan_pull(ref, program, output, cache_root, force)
    if runtime not in CONTAINER_RUNTIMES:
        pullers = ", ".join((*CONTAINER_RUNTIMES, PYXIS))
        raise ConfigError(
            f"the {runtime} runtime has no images to pull", f"choose --runtime: one of {pullers}"
        )
    checked = check_ref(ref, runtime)
    if runtime in ENGINE_RUNTIMES:
        if output is not None:
            raise ConfigError(
                f"-o/--output has no meaning for {runtime}: images live in its own store",
                "drop -o, or pull a SIF file with --runtime apptainer",
            )
        name = safe_name(checked)
        record = cache_root / ENGINE_DIR / f"{name}.json"
        return PullPlan(
            checked, runtime, program, None, record, record.with_suffix(".lock"), True, force
        )
    checked, stamp = _archive(checked)
    if output is None:
        target = cache_root / IMAGES_DIR / image_filename(checked)
        owned = True
    else:
        if not output.strip() or "\n" in output:
            raise ConfigError(f"-o {output!r} is not a usable path", "give a file or directory")
        given = Path(output).expanduser().absolute()
        target = given / image_filename(checked) if is_dir(given) else given
        if output.endswith(os.sep) and not is_dir(given):
            raise ConfigError(
                f"directory {given} does not exist", f"create it (mkdir -p {given}) or fix -o"
            )
        if not is_dir(target.parent):
            raise ConfigError(
                f"directory {target.parent} does not exist",
                f"create it (mkdir -p {target.parent}) or choose another -o",
            )
        owned = False
    return PullPlan(
        checked, runtime, program, target, sidecar_of(target), lock_of(target), owned, force, stamp
    )


def archive_path(ref: str) -> Path | None:
    """The file an archive reference names (``docker-archive:``, ``oci-archive:``), else None."""
    split = split_reference(ref)
    if split is None or split[0] not in ARCHIVE_SCHEMES:
        return None
    return Path(split[1]).expanduser().absolute()


def _archive(ref: str) -> tuple[str, str | None]:
    """``ref`` with an archive's path made absolute (two directories' ``img.tar`` are two
    images), and the archive's stamp now; other references as they are, without a stamp. An
    archive that is not here (a compute node may not see it) has no stamp: a pull of it is
    trusted as a registry's is offline, and a new pull is refused (``pull``)."""
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


@contextlib.contextmanager
def pull_lock(
    plan: PullPlan, where: str, environ: Mapping[str, str], say: Callable[[str], None]
) -> Iterator[None]:
    """Hold ``plan``'s lock for the pull of ``where`` (another pull of it: say whose, then
    wait), with SIGTERM/SIGHUP/SIGINT raised as errors so the temporary files go."""
    holder = locks.describe_holder("ctrain pull", environ)

    def waiting(who: str) -> None:
        say(f"waiting for another pull of {where} ({who})")

    with _signals_as_errors(), locks.hold_lock(plan.lock, holder, waiting):
        yield


def pull(
    plan: PullPlan,
    cache: cachedir.CacheChoice,
    environ: Mapping[str, str],
    min_free_gb: int,
    say: Callable[[str], None],
    *,
    tmpdir: Path | None = None,
    show: Callable[[Event], None] = lambda event: None,
    echo: Callable[[str], None] = lambda line: None,
) -> PullResult:
    """Run the pull ``plan``; what it does goes to ``say``, docker's layer progress to
    ``show``, apptainer's own output lines to ``echo``. ``tmpdir``: apptainer's temporary
    space (``cachedir.build_tmpdir``; default $TMPDIR, else /tmp)."""
    if plan.runtime == PYXIS:
        from ctrain.images.enroot import import_image

        return import_image(plan, cache, environ, min_free_gb, say, tmpdir=tmpdir)
    if plan.runtime == CHARLIECLOUD:
        from ctrain.images import charliecloud

        return charliecloud.pull(plan, cache, environ, min_free_gb, say, tmpdir=tmpdir)
    if plan.target is not None:
        _decide_sif(plan, plan.target)  # a refusal writes nothing, not even the lock file
    plan.record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with pull_lock(plan, str(plan.target) if plan.target else plan.ref, environ, say):
        if plan.target is None:
            from ctrain.images.engine_pull import pull_engine

            return pull_engine(plan, environ, say, show)
        target = plan.target
        for leftover in fs.remove_leftovers(target.parent, fs.temp_prefix(target, TEMP_TAG)):
            say(f"removed {leftover.name}, left by an interrupted pull")
        sidecar, action, reason = _decide_sif(plan, target)
        if action == "reuse" and sidecar is not None:
            return PullResult(str(target), False, sidecar, reason)
        archive = archive_path(plan.ref)
        if archive is not None and not archive.is_file():
            raise ConfigError(
                f"no archive at {archive} to pull",
                "give the archive's path (docker save -o FILE.tar IMAGE writes one)",
            )
        fs.check_free(target.parent, min_free_gb)
        temp_space = tmpdir or cachedir.node_local_tmp(environ)
        cachedir.check_tmpdir(temp_space, min_free_gb)
        say(f"pulling {plan.ref} into {target} with {plan.runtime} ({reason})")
        with cachedir.in_use(cache), fs.scratch(temp_space, cachedir.TOOL_TMP_PREFIX) as scratch:
            env = {**environ, **sif_pull_env(cache, scratch)}
            return _pull_sif(plan, target, env, reason, echo)


def sif_pull_env(cache: cachedir.CacheChoice, tmpdir: Path) -> dict[str, str]:
    """What ctrain adds to a SIF pull's environment: Apptainer's cache and temporary space."""
    return {**cachedir.apptainer_env(cache), **cachedir.tmpdir_env(tmpdir)}


def _decide_sif(plan: PullPlan, target: Path) -> tuple[Sidecar | None, Action, str]:
    sidecar = read_sidecar(plan.record)
    state = target_state(target)
    action, reason = decide(sidecar, plan.ref, state, plan.owned, plan.force, plan.stamp)
    if action == "refuse":
        raise ConfigError(f"{target} {reason}", "pass --force to replace it, or choose another -o")
    return sidecar, action, reason


def _pull_sif(
    plan: PullPlan,
    target: Path,
    env: Mapping[str, str],
    reason: str,
    echo: Callable[[str], None],
) -> PullResult:
    """Download into a temporary file, check it, rename it over ``target``, then record it."""
    try:
        with fs.atomic(target, fs.temp_beside(target, TEMP_TAG)) as temp:
            size = _download_sif(plan, temp, env, echo)
            # Old sidecar out first: a crash between the steps leaves no sidecar (pull again),
            # never a sidecar that describes a different file.
            plan.record.unlink(missing_ok=True)
        new = new_sidecar(
            plan.ref,
            plan.runtime,
            digest_in_ref(plan.ref),
            size=size,
            target=str(target.absolute()),
            source_stamp=plan.stamp,
        )
        fs.write_text(plan.record, new.to_json())
    except OSError as exc:
        raise fs.write_error(exc, target, "free some space, or pull elsewhere with -o") from exc
    return PullResult(str(target), True, new, reason)


def _download_sif(
    plan: PullPlan, temp: Path, env: Mapping[str, str], echo: Callable[[str], None]
) -> int:
    """Pull into ``temp`` (its output to ``echo``) and check the result; its size in bytes."""
    untouched = "the previous image is untouched"
    said: deque[str] = deque(maxlen=TAIL_LINES)

    def on_line(line: str) -> None:
        said.append(line)
        echo(line)

    code, stopped = proc.stream_forwarding(
        sif_pull_argv(plan.program, temp, plan.ref, plan.force), env, on_line
    )
    if stopped is not None:
        raise Interrupted(
            f"pull stopped by {stopped}; {untouched}", "run the same ctrain pull again"
        )
    if code != 0:
        raise ExternalToolError(
            f"{plan.runtime} pull {plan.ref} failed: "
            + (proc.last_line("".join(said)) or f"exit code {code}"),
            f"check the reference, the network and the registry login (on a node without the "
            f"network, a compute node say: pull it once on a login node, ctrain pull {plan.ref}, "
            f"into the same cache, and run again); {untouched}",
        )
    problem = check_sif(temp)
    if problem:
        raise ExternalToolError(
            f"{plan.runtime} pull wrote no valid SIF image for {plan.ref}: {problem}",
            f"run the pull again; if it keeps failing, run `{plan.runtime} pull` by hand",
        )
    proc.check(
        sif_inspect_argv(plan.program, temp),
        env,
        INSPECT_TIMEOUT,
        what=f"{plan.runtime} inspect of the pulled image",
        fix=f"run the pull again; {untouched}",
    )
    return temp.stat().st_size
