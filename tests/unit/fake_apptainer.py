"""A fake ``apptainer`` for unit tests: records its argv, writes SIF-looking files slowly.

Tests install it as ``BIN/apptainer`` (see ``install``) and steer it with variables:

  FAKE_APPTAINER_LOG     JSON lines file: one {"argv", "pid", "env"} per call (required)
  FAKE_APPTAINER_DELAY   seconds a pull takes, spread over its chunks (default 0)
  FAKE_APPTAINER_SIZE    payload bytes of a pulled image (default 65536)
  FAKE_APPTAINER_FAIL    "pull", "inspect" or "build": that subcommand fails with exit 255
  FAKE_APPTAINER_BAD     "1": pull writes a file that is not a SIF image

``pull DEST REF`` writes a SIF global header (magic at byte 32, data offset 4096, data size =
payload) and then the payload: REF's bytes repeated, so a test can tell which ref a file holds.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
from pathlib import Path

HEADER = struct.Struct("<32s10s3s3s16s8q")
DATA_OFFSET = 4096


def sif_bytes(ref: str, payload: int) -> tuple[bytes, bytes]:
    """(header block, payload) of a small valid-looking SIF image for ``ref``."""
    header = HEADER.pack(
        b"#!/usr/bin/env run-singularity\n",
        b"SIF_MAGIC\x00",
        b"01\x00",
        b"02\x00",
        b"0123456789abcdef",
        1700000000,
        1700000000,
        47,
        48,
        HEADER.size,
        0,
        DATA_OFFSET,
        payload,
    )
    body = (ref.encode() * (payload // max(1, len(ref)) + 1))[:payload]
    return header.ljust(DATA_OFFSET, b"\x00"), body


def log(argv: list[str]) -> None:
    keep = ("APPTAINER_CACHEDIR", "APPTAINER_TMPDIR", "SINGULARITY_CACHEDIR")
    line = {"argv": argv, "pid": os.getpid(), "env": {k: os.environ.get(k) for k in keep}}
    with open(os.environ["FAKE_APPTAINER_LOG"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def fail(message: str) -> int:
    print(f"FATAL:   {message}", file=sys.stderr)
    return 255


def pull(args: list[str]) -> int:
    force = "--force" in args
    rest = [a for a in args if a != "--force"]
    if len(rest) != 2:
        return fail(f"pull takes DEST REF, got {rest}")
    dest, ref = Path(rest[0]), rest[1]
    if os.environ.get("FAKE_APPTAINER_FAIL") == "pull":
        return fail(f"Unable to pull {ref}: manifest unknown")
    if dest.exists() and not force:
        return fail(f"Image file already exists: {dest!r} - will not overwrite")
    payload = int(os.environ.get("FAKE_APPTAINER_SIZE", "65536"))
    delay = float(os.environ.get("FAKE_APPTAINER_DELAY", "0"))
    header, body = sif_bytes(ref, payload)
    if os.environ.get("FAKE_APPTAINER_BAD") == "1":
        header = b"<html>not an image</html>".ljust(DATA_OFFSET)
    chunks = 20
    step = max(1, len(body) // chunks)
    with dest.open("wb") as handle:
        handle.write(header)
        handle.flush()
        for start in range(0, len(body), step):
            handle.write(body[start : start + step])
            handle.flush()
            time.sleep(delay / chunks)
    print(f"INFO:    Downloading {ref}", file=sys.stderr)
    return 0


def inspect(args: list[str]) -> int:
    if os.environ.get("FAKE_APPTAINER_FAIL") == "inspect":
        return fail("could not open image: invalid SIF file")
    path = Path(args[-1])
    data = path.read_bytes()[:64]
    if data[32:42] != b"SIF_MAGIC\x00":
        return fail(f"{path}: not a SIF file")
    print("org.label-schema.schema-version: 1.0")
    return 0


def build(args: list[str]) -> int:
    """``build [--fakeroot] [--build-arg K=V]... DEST RECIPE``: a SIF made from RECIPE's name."""
    rest = [a for a in args if a != "--fakeroot"]
    while rest[:1] == ["--build-arg"]:
        rest = rest[2:]
    if len(rest) != 2:
        return fail(f"build takes DEST RECIPE, got {rest}")
    if os.environ.get("FAKE_APPTAINER_FAIL") == "build":
        return fail("While performing build: conveyor failed")
    dest, recipe = Path(rest[0]), rest[1]
    header, body = sif_bytes(recipe, 4096)
    if os.environ.get("FAKE_APPTAINER_BAD") == "1":
        header = b"not an image".ljust(DATA_OFFSET)
    dest.write_bytes(header + body)
    print(f"INFO:    Build complete: {dest}")
    return 0


def overlay_create(args: list[str]) -> int:
    size = int(args[args.index("--size") + 1])
    path = Path(args[-1])
    if path.exists():
        return fail(f"{path} already exists")
    with path.open("xb") as handle:
        os.truncate(handle.fileno(), size * 1024 * 1024)
    return 0


def main(argv: list[str]) -> int:
    log(argv)
    if argv[:1] == ["--version"]:
        print("apptainer version 1.3.4")
        return 0
    if argv[:1] == ["pull"]:
        return pull(argv[1:])
    if argv[:1] == ["inspect"]:
        return inspect(argv[1:])
    if argv[:1] == ["build"]:
        return build(argv[1:])
    if argv[:2] == ["overlay", "create"]:
        return overlay_create(argv[2:])
    return fail(f"fake apptainer: unsupported {argv}")


def install(bin_dir: Path, name: str = "apptainer") -> Path:
    """Put this fake in ``bin_dir`` under ``name``, run by the tests' interpreter."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / name
    program.write_text(f"#!{sys.executable}\n" + Path(__file__).read_text(encoding="utf-8"))
    program.chmod(0o755)
    return program


def calls(log_file: Path) -> list[dict[str, object]]:
    if not log_file.exists():
        return []
    return [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
