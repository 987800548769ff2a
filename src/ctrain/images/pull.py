"""``ctrain pull``: targets, sidecar records, locks and the atomic rename.

A SIF pull (apptainer, singularity) downloads to ``.<name>.pull-<token>`` next to the target,
checks the SIF header and ``<runtime> inspect``, then renames over the target: the target never
holds a partial file, and a pull killed at any moment leaves the previous one intact. The next
pull of the same target removes such leftovers. A sidecar ``<target>.json`` records the reference,
the digest when known, the time and ctrain's version; a target whose sidecar names the same
reference and whose file is whole is reused without a download.

A Docker (or Podman) pull is ``docker pull REF`` and ``docker image inspect REF``; the image lives
in the engine's store, the sidecar in ``CACHE/docker/``.

Concurrent pulls of one target serialise on ``flock(<target>.lock)``: the first downloads, the
others wait, then find the target up to date and reuse it.

Pure: reference checks, names, argv builders, the SIF header check, sidecars, the reuse decision.
Effectful: ``hold_lock``, ``pull`` (processes through ``ctrain.util.proc`` only).
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import hashlib
import json
import os
import re
import secrets
import signal
import struct
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import FrameType
from typing import Literal

from ctrain import __version__
from ctrain.errors import ConfigError, ExternalToolError, Interrupted
from ctrain.images import cachedir
from ctrain.util import locks, proc

SIF_RUNTIMES = ("apptainer", "singularity")
ENGINE_RUNTIMES = ("docker", "podman")
SIF_SCHEMES = ("docker", "docker-daemon", "oras", "library", "shub", "http", "https")
IMAGES_DIR = "images"  # pulled SIF files in the cache
ENGINE_DIR = "docker"  # sidecars of docker/podman pulls in the cache
PULL_TIMEOUT = None  # a large image on a slow link takes as long as it takes
INSPECT_TIMEOUT = 300.0

# The SIF global header (sylabs/sif, pkg/sif): a 32-byte launch line, "SIF_MAGIC\0" at byte 32,
# a 3-byte version, a 3-byte arch, a 16-byte UUID, then 8 little-endian int64: created, modified,
# descriptors free, descriptors total, descriptors offset, descriptors size, data offset, data
# size. 128 bytes in all.
SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")
SIF_MAGIC = b"SIF_MAGIC\x00"
SIF_MAGIC_OFFSET = 32

_DIGEST = re.compile(r"@(sha256:[0-9a-f]{64})\Z")
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
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        raise ConfigError(
            f"image reference {ref!r} contains spaces or control characters",
            "give the reference as the registry shows it, without spaces",
        )
    scheme, sep, rest = text.partition("://")
    if runtime in SIF_RUNTIMES:
        if not sep:
            raise ConfigError(
                f"image reference {text!r} has no scheme",
                f"write docker://{text} (or oras://, library://, https://)",
            )
        if scheme not in SIF_SCHEMES or not rest:
            raise ConfigError(
                f"{runtime} cannot pull {text!r}",
                "use one of " + ", ".join(f"{s}://" for s in SIF_SCHEMES),
            )
        return text
    if sep:
        if scheme != "docker":
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


def digest_in_ref(ref: str) -> str | None:
    """``sha256:...`` when the reference is pinned by digest (``...@sha256:<64 hex>``)."""
    found = _DIGEST.search(ref)
    return found.group(1) if found else None


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


def sidecar_of(target: Path) -> Path:
    return target.with_name(target.name + ".json")


def lock_of(target: Path) -> Path:
    return target.with_name(target.name + ".lock")


def temp_prefix(target: Path) -> str:
    """Temporary files of pulls into ``target`` are ``<dir>/.<name>.pull-<token>``."""
    return f".{target.name}.pull-"


def temp_for(target: Path, token: str) -> Path:
    return target.with_name(temp_prefix(target) + token)


# ---------------------------------------------------------------------------------------------
# argv builders


def sif_pull_argv(program: str, temp: Path, ref: str, force: bool) -> list[str]:
    return [program, "pull", *(["--force"] if force else []), str(temp), ref]


def sif_inspect_argv(program: str, path: Path) -> list[str]:
    return [program, "inspect", str(path)]


def engine_pull_argv(program: str, ref: str) -> list[str]:
    return [program, "pull", ref]


def engine_inspect_argv(program: str, ref: str) -> list[str]:
    return [program, "image", "inspect", ref]


# ---------------------------------------------------------------------------------------------
# Checks and parsers


def sif_problem(header: bytes, file_size: int) -> str | None:
    """Why these first bytes of a ``file_size``-byte file are not a whole SIF image, or None."""
    if len(header) < SIF_HEADER.size:
        return f"{file_size} bytes, shorter than a SIF header ({SIF_HEADER.size} bytes)"
    (_, magic, version, _, _, _, _, free, total, desc_off, desc_len, data_off, data_len) = (
        SIF_HEADER.unpack_from(header)
    )
    if magic != SIF_MAGIC:
        return f"no SIF_MAGIC at byte {SIF_MAGIC_OFFSET}: not a SIF image"
    if not version.rstrip(b"\x00").isdigit():
        return f"unreadable SIF version {version!r}"
    if min(free, total, desc_len, data_off, data_len) < 0 or desc_off < SIF_HEADER.size:
        return "malformed SIF header"
    end = max(desc_off + desc_len, data_off + data_len)
    if end > file_size:
        return f"truncated: its header describes {end} bytes, the file has {file_size}"
    return None


def check_sif(path: Path) -> str | None:
    """``sif_problem`` for a file on disk (an unreadable file is a problem too)."""
    try:
        with path.open("rb") as handle:
            header = handle.read(SIF_HEADER.size)
            size = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        return f"cannot read it ({exc.strerror})"
    return sif_problem(header, size)


@dataclass(frozen=True)
class EngineImage:
    id: str
    repo_digests: tuple[str, ...]


def parse_engine_inspect(stdout: str) -> EngineImage:
    """The image id and repo digests from ``docker image inspect REF`` (a JSON list)."""
    data = json.loads(stdout)
    item = data[0] if isinstance(data, list) and data else data
    if not isinstance(item, dict) or not isinstance(item.get("Id"), str):
        raise ValueError("no image Id in the inspect output")
    digests = item.get("RepoDigests") or []
    return EngineImage(item["Id"], tuple(d for d in digests if isinstance(d, str)))


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


PullStatus = Literal["downloaded", "up to date", "unknown"]


def engine_pull_status(stdout: str) -> PullStatus:
    """What ``docker pull`` says it did, from its ``Status:`` line."""
    if re.search(r"^Status: Image is up to date", stdout, re.MULTILINE):
        return "up to date"
    if re.search(r"^Status: Downloaded newer image", stdout, re.MULTILINE):
        return "downloaded"
    return "unknown"


# ---------------------------------------------------------------------------------------------
# Sidecars


@dataclass(frozen=True)
class Sidecar:
    ref: str
    runtime: str
    pulled_at: str  # ISO 8601, UTC
    ctrain_version: str
    digest: str | None = None
    size: int | None = None  # bytes of the SIF file
    image_id: str | None = None  # docker/podman image id
    target: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def parse(cls, text: str) -> Sidecar | None:
        """The sidecar in ``text``, or None when it is not one (never raises)."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for name in ("ref", "runtime", "pulled_at", "ctrain_version"):
            if not isinstance(values.get(name), str):
                return None
        for name in ("digest", "image_id", "target"):
            if values.get(name) is not None and not isinstance(values[name], str):
                return None
        size = values.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
            return None
        return cls(**values)


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_sidecar(path: Path) -> Sidecar | None:
    try:
        return Sidecar.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with temp.open("w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
    fsync_dir(path.parent)


# ---------------------------------------------------------------------------------------------
# The reuse decision


Action = Literal["reuse", "pull", "refuse"]


@dataclass(frozen=True)
class TargetState:
    exists: bool
    size: int | None = None
    problem: str | None = None  # from check_sif


def decide(
    sidecar: Sidecar | None, ref: str, state: TargetState, owned: bool, force: bool
) -> tuple[Action, str]:
    """Reuse, pull or refuse a SIF target, and why.

    ``owned``: the target is in ctrain's cache (a file there without a sidecar is ctrain's own
    leftover). Outside the cache ctrain replaces only what it pulled itself, unless ``force``."""
    if not state.exists:
        return "pull", "not present"
    if sidecar is None and not owned and not force:
        return "refuse", "exists and was not pulled by ctrain (no sidecar)"
    if sidecar is not None and sidecar.ref != ref and not owned and not force:
        return "refuse", f"holds {sidecar.ref}, not {ref}"
    if force:
        return "pull", "--force"
    if sidecar is None:
        return "pull", "no sidecar"
    if sidecar.ref != ref:
        return "pull", f"holds {sidecar.ref}"
    if state.problem:
        return "pull", f"damaged ({state.problem})"
    if sidecar.size is not None and state.size != sidecar.size:
        return "pull", f"changed since the pull ({state.size} bytes, {sidecar.size} recorded)"
    return "reuse", "up to date"


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
    if runtime not in SIF_RUNTIMES + ENGINE_RUNTIMES:
        raise ConfigError(
            f"the {runtime} runtime has no images to pull",
            "choose --runtime apptainer, singularity, docker or podman",
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
        checked, runtime, program, target, sidecar_of(target), lock_of(target), owned, force
    )


def remove_stale_temps(target: Path) -> list[Path]:
    """Remove what killed pulls into ``target`` left behind. Call with the target's lock held:
    then no live pull owns any of them."""
    removed = []
    prefix = temp_prefix(target)
    with contextlib.suppress(FileNotFoundError):
        for entry in target.parent.iterdir():
            if entry.name.startswith(prefix) and not entry.is_dir():
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                    removed.append(entry)
    return removed


def _state(target: Path) -> TargetState:
    try:
        size = target.stat().st_size
    except FileNotFoundError:
        return TargetState(False)
    if not target.is_file():
        raise ConfigError(f"{target} exists and is not a file", "choose another -o")
    return TargetState(True, size, check_sif(target))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pull(
    plan: PullPlan,
    cache: cachedir.CacheChoice,
    environ: Mapping[str, str],
    min_free_gb: int,
    say: Callable[[str], None],
) -> PullResult:
    """Run the pull ``plan``; progress goes to ``say``."""
    if plan.target is not None:
        _decide_sif(plan, plan.target)  # a refusal writes nothing, not even the lock file
    plan.record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    holder = locks.describe_holder("ctrain pull", environ)
    where = str(plan.target) if plan.target else plan.ref

    def waiting(who: str) -> None:
        say(f"waiting for another pull of {where} ({who})")

    with _signals_as_errors(), locks.hold_lock(plan.lock, holder, waiting):
        if plan.target is None:
            return _pull_engine(plan, environ, say)
        return _pull_sif(plan, plan.target, cache, environ, min_free_gb, say)


def _decide_sif(plan: PullPlan, target: Path) -> tuple[Sidecar | None, Action, str]:
    sidecar = read_sidecar(plan.record)
    action, reason = decide(sidecar, plan.ref, _state(target), plan.owned, plan.force)
    if action == "refuse":
        raise ConfigError(f"{target} {reason}", "pass --force to replace it, or choose another -o")
    return sidecar, action, reason


def _pull_sif(
    plan: PullPlan,
    target: Path,
    cache: cachedir.CacheChoice,
    environ: Mapping[str, str],
    min_free_gb: int,
    say: Callable[[str], None],
) -> PullResult:
    for leftover in remove_stale_temps(target):
        say(f"removed {leftover.name}, left by an interrupted pull")
    sidecar, action, reason = _decide_sif(plan, target)
    if action == "reuse" and sidecar is not None:
        return PullResult(str(target), False, sidecar, reason)
    cachedir.check_free(target.parent, min_free_gb)
    cachedir.check_free(cache.tmp, min_free_gb)
    env = {**environ, **cachedir.apptainer_env(cache)}
    temp = temp_for(target, f"{os.getpid()}-{secrets.token_hex(4)}")
    say(f"pulling {plan.ref} into {target} with {plan.runtime} ({reason})")
    try:
        done = proc.run(sif_pull_argv(plan.program, temp, plan.ref, plan.force), env, PULL_TIMEOUT)
        if done.returncode != 0:
            detail = _last_line(done.stderr or done.stdout) or f"exit code {done.returncode}"
            raise ExternalToolError(
                f"{plan.runtime} pull {plan.ref} failed: {detail}",
                "check the reference, the network and the registry login; "
                "the previous image is untouched",
            )
        problem = check_sif(temp)
        if problem:
            raise ExternalToolError(
                f"{plan.runtime} pull wrote no valid SIF image for {plan.ref}: {problem}",
                f"run the pull again; if it keeps failing, run `{plan.runtime} pull` by hand",
            )
        inspect = proc.run(sif_inspect_argv(plan.program, temp), env, INSPECT_TIMEOUT)
        if inspect.returncode != 0:
            detail = _last_line(inspect.stderr or inspect.stdout) or f"exit {inspect.returncode}"
            raise ExternalToolError(
                f"{plan.runtime} inspect rejects the pulled image: {detail}",
                "run the pull again; the previous image is untouched",
            )
        fsync_file(temp)
        new = Sidecar(
            ref=plan.ref,
            runtime=plan.runtime,
            pulled_at=now_iso(),
            ctrain_version=__version__,
            digest=digest_in_ref(plan.ref),
            size=temp.stat().st_size,
            target=str(target.absolute()),
        )
        # Old sidecar out first: a crash between the steps leaves no sidecar (pull again),
        # never a sidecar that describes a different file.
        plan.record.unlink(missing_ok=True)
        os.replace(temp, target)
        fsync_dir(target.parent)
        write_atomic(plan.record, new.to_json())
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise ConfigError(
                f"no space left in {target.parent}", "free some space, or pull elsewhere with -o"
            ) from exc
        raise ConfigError(f"cannot write {target}: {exc.strerror}", "check the directory") from exc
    finally:
        temp.unlink(missing_ok=True)
    return PullResult(str(target), True, new, reason)


def _engine_image(plan: PullPlan, environ: Mapping[str, str]) -> EngineImage | None:
    done = proc.run(engine_inspect_argv(plan.program, plan.ref), environ, INSPECT_TIMEOUT)
    if done.returncode != 0:
        return None
    try:
        return parse_engine_inspect(done.stdout)
    except (ValueError, KeyError, IndexError):
        return None


def _pull_engine(
    plan: PullPlan, environ: Mapping[str, str], say: Callable[[str], None]
) -> PullResult:
    sidecar = read_sidecar(plan.record)
    present = _engine_image(plan, environ)
    if (
        not plan.force
        and sidecar is not None
        and present is not None
        and sidecar.ref == plan.ref
        and sidecar.image_id == present.id
    ):
        return PullResult(plan.ref, False, sidecar, "up to date")
    say(f"pulling {plan.ref} with {plan.runtime}")
    done = proc.run(engine_pull_argv(plan.program, plan.ref), environ, PULL_TIMEOUT)
    if done.returncode != 0:
        detail = _last_line(done.stderr or done.stdout) or f"exit code {done.returncode}"
        raise ExternalToolError(
            f"{plan.runtime} pull {plan.ref} failed: {detail}",
            f"check the reference, the registry and `{plan.runtime} login`",
        )
    image = _engine_image(plan, environ)
    if image is None:
        raise ExternalToolError(
            f"{plan.runtime} pulled {plan.ref} but `{plan.runtime} image inspect` cannot see it",
            f"run {plan.runtime} image inspect {plan.ref} by hand",
        )
    digest_line = re.search(r"^Digest: (sha256:[0-9a-f]{64})", done.stdout, re.MULTILINE)
    new = Sidecar(
        ref=plan.ref,
        runtime=plan.runtime,
        pulled_at=now_iso(),
        ctrain_version=__version__,
        digest=pick_digest(plan.ref, image.repo_digests)
        or (digest_line.group(1) if digest_line else None),
        image_id=image.id,
    )
    write_atomic(plan.record, new.to_json())
    status = engine_pull_status(done.stdout)
    return PullResult(plan.ref, status != "up to date", new, f"{plan.runtime} pull: {status}")
