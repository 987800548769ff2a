"""Images on disk: the cache (cache/oci-tmp/<digest>), ``pull`` (facts: "pull"), ``build``
(facts: "build", "Definition files") and ``inspect``; temporary space ``build-temp-*`` in
APPTAINER_TMPDIR, removed on exit and on SIGINT/SIGTERM but not on SIGKILL."""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.support.standin import remote
from tests.support.standin.cli import given, parse, values
from tests.support.standin.identity import Fatal, Identity, Interrupted
from tests.support.standin.sif import Metadata, read_metadata, sif_bytes

Event = Callable[[dict[str, object]], None]
KINDS = {"docker": "oci-tmp", "oras": "oras", "library": "library", "shub": "shub"}


@contextlib.contextmanager
def build_temp(who: Identity, environ: dict[str, str], given: list[str]) -> Iterator[Path]:
    parent = given[-1] if given else who.setting(environ, "TMPDIR") or environ.get("TMPDIR")

    def stop(number: int, _frame: object) -> None:
        raise Interrupted(f"interrupted by signal {number}")

    # Handlers and the name first: a signal as soon as build-temp-* exists must still remove it.
    previous = [signal.signal(n, stop) for n in (signal.SIGINT, signal.SIGTERM)]
    work = Path(parent or "/tmp", f"build-temp-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        work.mkdir(mode=0o700)
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        for number, handler in zip((signal.SIGINT, signal.SIGTERM), previous, strict=True):
            signal.signal(number, handler)


def hold_until_usr1() -> None:
    """Block until SIGUSR1 (blocked by the caller beforehand, so that one sent early is kept
    pending); SIGTERM, SIGINT and SIGKILL end the process as at any other moment."""
    while signal.sigtimedwait({signal.SIGUSR1}, 1.0) is None:
        pass


def write_slowly(path: Path, head: bytes, body: bytes, environ: dict[str, str]) -> None:
    """Write an image in 20 steps over FAKE_APPTAINER_DELAY seconds (BAD: not a SIF). With
    FAKE_APPTAINER_HOLD=BYTES, write its first BYTES bytes (the header at least) at once, then
    hold until SIGUSR1 before writing the rest: a download caught half-way, whatever the
    machine's speed."""
    if environ.get("FAKE_APPTAINER_BAD") == "1":
        head = b"<html>not an image</html>".ljust(len(head))
    delay, chunks = float(environ.get("FAKE_APPTAINER_DELAY", "0")), 20
    step = max(1, len(body) // chunks)
    held = environ.get("FAKE_APPTAINER_HOLD")
    if held is not None:  # before the file exists: a SIGUSR1 sent once it does then waits
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    with path.open("wb") as handle:
        if held is not None:
            first = max(0, int(held) - len(head))
            handle.write(head + body[:first])
            handle.flush()
            hold_until_usr1()
            head, body = b"", body[first:]
        handle.write(head)
        handle.flush()
        for start in range(0, len(body), step):
            handle.write(body[start : start + step])
            handle.flush()
            time.sleep(delay / chunks)


def cache_entry(ref: str, who: Identity, environ: dict[str, str], digest: str) -> Path:
    kind = KINDS.get(ref.split(":", 1)[0], "net")
    return remote.cache_dir(who, environ) / kind / digest.split(":")[-1]


def cached_image(
    ref: str, who: Identity, environ: dict[str, str], disable_cache: bool, event: Event,
    plain_http: bool, work: Path | None = None,
) -> tuple[Path | None, Metadata]:  # fmt: skip
    """(the SIF in the cache, its metadata) of a URI: the registry is asked first (network),
    then the cache; a miss downloads and converts in ``work`` (a build-temp-* directory, made
    here when None) and moves the result into the cache. With --disable-cache: (None,
    metadata), nothing kept."""
    if not ref.startswith(remote.REMOTE):  # docker-daemon:, oci-archive: ... are local
        return None, {"environment": {"PATH": remote.DEFAULT_PATH}}
    entry = cache_entry(ref, who, environ, remote.digest_of(ref, environ, plain_http))
    if not disable_cache and entry.is_file():
        return entry, read_metadata(entry)
    _, metadata = remote.fetch(ref, environ, event, plain_http)
    if disable_cache:
        return None, metadata
    if work is None:
        with build_temp(who, environ, []) as made:
            convert(ref, metadata, entry, made, environ)
    else:
        convert(ref, metadata, entry, work, environ)
    return entry, metadata


def convert(ref: str, metadata: Metadata, entry: Path, work: Path, environ: dict[str, str]) -> None:
    """Write the SIF in ``work`` (FAKE_APPTAINER_DELAY), then move it into the cache."""
    head, body = sif_bytes(ref, int(environ.get("FAKE_APPTAINER_SIZE", "65536")), metadata)
    write_slowly(work / "image.sif", head, body, environ)
    entry.parent.mkdir(parents=True, exist_ok=True)
    partial = entry.with_name(f".{entry.name}.{os.getpid()}")
    shutil.copyfile(work / "image.sif", partial)
    partial.rename(entry)


def pull(args: list[str], environ: dict[str, str], who: Identity, event: Event) -> int:
    flags, rest = parse("pull", args, who)
    ref = rest[-1]
    remote.check_reference(ref, "pull")
    name = values(flags, "--name") or rest[:-1]
    if not name:
        base = re.sub(r"^[a-z-]+:/*", "", ref).rsplit("/", 1)[-1]
        name = [base.replace(":", "_") + ("" if ":" in base else "_latest") + ".sif"]
    dest = Path(*values(flags, "--dir"), name[-1])
    if environ.get("FAKE_APPTAINER_FAIL") == "pull":
        raise Fatal(f"Unable to pull {ref}: manifest unknown")
    if dest.exists() and not values(flags, "--force", "-F"):
        raise Fatal(f"Image file already exists: {str(dest)!r} - will not overwrite")
    disable = bool(values(flags, "--disable-cache")) or who.enabled(environ, "DISABLE_CACHE")
    with build_temp(who, environ, values(flags, "--tmpdir")) as work:
        print(f"INFO:    Converting OCI blobs to SIF format ({ref})", file=sys.stderr)
        plain_http = given(flags, "--no-https")
        entry, metadata = cached_image(ref, who, environ, disable, event, plain_http, work)
        if entry is None:  # straight to DEST
            head, body = sif_bytes(ref, int(environ.get("FAKE_APPTAINER_SIZE", "65536")), metadata)
            write_slowly(dest, head, body, environ)
        else:  # copied from the cache through DEST_DIR/tmp-copy-* and a rename
            handle, temp = tempfile.mkstemp(prefix="tmp-copy-", dir=dest.parent)
            os.close(handle)
            shutil.copyfile(entry, temp)
            os.replace(temp, dest)
    return 0
