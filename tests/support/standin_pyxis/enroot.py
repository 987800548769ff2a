"""The enroot stand-in's commands: ``enroot version`` and ``enroot import`` (docs/pyxis-facts.md,
"enroot import"; the module docstring of tests/support/fake_pyxis.py lists what is modelled).

``import`` fetches the image for real from a registry over the v2 API (index or manifest, then
the config and layer blobs, kept in ENROOT_CACHE_PATH by digest), unpacks the layers in order
(whiteouts applied) in a temporary directory under ENROOT_TEMP_PATH, writes the image's
environment and provenance as enroot does, and makes the output file with the real mksquashfs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

VERSION = "4.1.2"  # enroot's newest release when this was written (tag v4.1.2)
SQUASH_OPTIONS = "-comp lzo -noD -exit-on-error"
ACCEPT_INDEX = (
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.oci.image.index.v1+json"
)
ACCEPT_MANIFEST = (
    "application/vnd.docker.distribution.manifest.v2+json, "
    "application/vnd.oci.image.manifest.v1+json"
)
# enroot's documented form: docker://[USER@][REGISTRY#]IMAGE[:TAG]
URI = re.compile(r"^docker://(?:([^@#/]+)@)?(?:([^#/]+)#)?([a-z0-9/._-]+)(?::([A-Za-z0-9._:-]+))?$")
DOCKER_HUB = "registry-1.docker.io"
USAGE = "Usage: enroot import [options] [--] URI\n"


class Failed(Exception):
    """enroot's ``[ERROR] ...`` line and exit status 1."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def settings(environ: Mapping[str, str]) -> dict[str, str]:
    """enroot's configuration (enroot.in): the environment wins over the defaults, XDG ones
    under $HOME; a value that reads as "no" unsets the setting."""
    home = environ.get("HOME") or str(Path.home())
    xdg_cache = environ.get("XDG_CACHE_HOME") or f"{home}/.cache"
    xdg_data = environ.get("XDG_DATA_HOME") or f"{home}/.local/share"
    xdg_runtime = environ.get("XDG_RUNTIME_DIR") or "/run"
    defaults = {
        "ENROOT_RUNTIME_PATH": f"{xdg_runtime}/enroot",
        "ENROOT_CACHE_PATH": f"{xdg_cache}/enroot",
        "ENROOT_DATA_PATH": f"{xdg_data}/enroot",
        "ENROOT_TEMP_PATH": environ.get("TMPDIR") or "/tmp",
        "ENROOT_SQUASH_OPTIONS": SQUASH_OPTIONS,
        "ENROOT_MAX_PROCESSORS": str(os.cpu_count() or 1),
        "ENROOT_ALLOW_HTTP": "false",
    }
    found = {name: environ.get(name) or value for name, value in defaults.items()}
    return {k: v for k, v in found.items() if not re.match(r"^(no?|N[oO]?|[fF](alse)?|FALSE)$", v)}


def parse_import(args: list[str]) -> tuple[str, str, str]:
    """(uri, output, arch) as ``enroot::import`` reads them; a usage error raises Failed."""
    output = arch = ""
    while args:
        arg = args[0]
        if arg in ("-a", "--arch", "-o", "--output"):
            if len(args) < 2 or not args[1]:
                raise Failed(USAGE)
            value, args = args[1], args[2:]
        elif arg.startswith(("--arch=", "--output=")):
            value, args = arg.partition("=")[2], args[1:]
            if not value:
                raise Failed(USAGE)
        elif arg == "--":
            args = args[1:]
            break
        elif arg.startswith("-") and arg != "-":
            raise Failed(USAGE)
        else:
            break
        if arg.startswith(("-a", "--arch")):
            arch = value
        else:
            output = value
    if len(args) != 1:
        raise Failed(USAGE)
    return args[0], output, arch


def get(url: str, accept: str, missing_ok: bool = False) -> bytes | None:
    request = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            data: bytes = response.read()
            return data
    except urllib.error.HTTPError as exc:
        if missing_ok and exc.code in (401, 404):
            return None
        raise Failed(f"URL {url} returned error code: {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise Failed(f"Could not fetch {url}: {exc}") from exc


def blob(base: str, digest: str, cache: Path) -> Path:
    """A blob from the cache (ENROOT_CACHE_PATH/<digest>), downloaded once."""
    path = cache / digest
    if not path.exists():
        data = get(f"{base}/blobs/{digest}", "*/*")
        temp = path.with_name(f"{digest}.{os.getpid()}")
        temp.write_bytes(data or b"")
        temp.rename(path)
    return path


def manifest(base: str, tag: str) -> dict[str, object]:
    """The image manifest for this machine's architecture (amd64), through an index if any."""
    index = get(f"{base}/manifests/{tag}", ACCEPT_INDEX, missing_ok=True)
    ref = tag
    if index is not None:
        for entry in json.loads(index).get("manifests", []):
            if entry.get("platform", {}).get("architecture") == "amd64":
                ref = entry["digest"]
    data = get(f"{base}/manifests/{ref}", ACCEPT_MANIFEST)
    found: dict[str, object] = json.loads(data or b"{}")
    if "config" not in found:
        raise Failed(f"Could not parse digest information from {base}/manifests/{ref}")
    return found


def unpack(layer: Path, rootfs: Path) -> None:
    """One layer over ``rootfs``: whiteouts remove what lower layers had; no device files (not
    root), no owners (enroot's -all-root)."""
    with tarfile.open(layer, "r:*") as tar:
        for member in tar:
            name = Path(member.name)
            if ".." in name.parts or name.is_absolute():
                raise Failed(f"unsafe path in layer: {member.name}")
            if name.name == ".wh..wh..opq":
                for entry in (rootfs / name.parent).iterdir():
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            elif name.name.startswith(".wh."):
                gone = rootfs / name.parent / name.name[4:]
                shutil.rmtree(gone) if gone.is_dir() and not gone.is_symlink() else gone.unlink()
            elif not (member.ischr() or member.isblk() or member.isfifo()):
                tar.extract(member, rootfs, set_attrs=not member.issym(), filter="tar")


def configure(rootfs: Path, config: Mapping[str, object], uri: str) -> None:
    """enroot's docker::configure, in part: /etc/environment from the config's Env, /etc/rc's
    provenance line."""
    inner = config.get("config") or {}
    env = inner.get("Env") or [] if isinstance(inner, dict) else []
    (rootfs / "etc").mkdir(exist_ok=True)
    (rootfs / "etc" / "environment").write_text("".join(f"{line}\n" for line in env))
    (rootfs / "etc" / "rc").write_text(f"# enroot-provenance: {uri}\n")


def import_image(args: list[str], environ: Mapping[str, str]) -> None:
    uri, output, _arch = parse_import(args)
    found = URI.match(uri)
    if found is None:
        raise Failed(f"Invalid image reference: {uri}" + ("" if uri.startswith("docker://") else
                     " (stand-in: only docker:// is modelled)"))  # fmt: skip
    _user, registry, image, tag = found.groups()
    registry, tag = registry or DOCKER_HUB, tag or "latest"
    conf = settings(environ)
    for name in ("ENROOT_CACHE_PATH", "ENROOT_DATA_PATH", "ENROOT_RUNTIME_PATH"):
        os.makedirs(conf[name], mode=0o700, exist_ok=True)
    filename = Path(output or f"{image.replace('/', '+')}+{tag}.sqsh").absolute()
    if filename.exists():
        raise Failed(f"File already exists: {filename}")
    proto = "http" if "ENROOT_ALLOW_HTTP" in conf else "https"
    base = f"{proto}://{registry}/v2/{image}"
    cache = Path(conf["ENROOT_CACHE_PATH"])
    with tempfile.TemporaryDirectory(prefix="enroot.", dir=conf["ENROOT_TEMP_PATH"]) as tmp:
        log("[INFO] Fetching image manifest")
        found_manifest = manifest(base, tag)
        config_blob = found_manifest["config"]
        layers = found_manifest.get("layers") or []
        assert isinstance(config_blob, dict) and isinstance(layers, list)
        config = json.loads(blob(base, config_blob["digest"], cache).read_bytes())
        rootfs = Path(tmp) / "rootfs"
        rootfs.mkdir()
        for layer in layers:
            unpack(blob(base, layer["digest"], cache), rootfs)
        configure(rootfs, config, f"docker://{registry}#{image}:{tag}")
        log("[INFO] Creating squashfs filesystem...")
        squash = [str(rootfs), str(filename), "-all-root", "-no-progress",
                  "-processors", conf["ENROOT_MAX_PROCESSORS"],
                  *shlex.split(conf.get("ENROOT_SQUASH_OPTIONS", ""))]  # fmt: skip
        hold(environ, filename)
        done = subprocess.run(["mksquashfs", *squash], stdout=sys.stderr, check=False)
        if done.returncode != 0:
            raise Failed(f"mksquashfs failed with exit status {done.returncode}")


def hold(environ: Mapping[str, str], filename: Path) -> None:
    """Test steering, FAKE_ENROOT_HOLD=FILE: write the start of a squashfs file (as mksquashfs
    does), create FILE, then wait until killed: an import interrupted half-way."""
    marker = environ.get("FAKE_ENROOT_HOLD")
    if not marker:
        return
    filename.write_bytes(b"hsqs" + b"\0" * 60)
    Path(marker).touch()
    read_end, _write_end = os.pipe()  # nobody writes: blocks until a signal ends the process
    os.read(read_end, 1)


def record(environ: Mapping[str, str], argv: list[str]) -> None:
    """FAKE_ENROOT_LOG: one JSON line per call (argv, the ENROOT_* variables it was given)."""
    path = environ.get("FAKE_ENROOT_LOG")
    if path:
        given = {k: v for k, v in environ.items() if k.startswith("ENROOT_")}
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"argv": argv, "env": given}) + "\n")


def main(argv: list[str], environ: dict[str, str]) -> int:
    record(environ, argv[1:])
    command, args = (argv[1], argv[2:]) if len(argv) > 1 else ("", [])
    try:
        if command == "version":
            print(VERSION)
        elif command == "import":
            import_image(args, environ)
        else:
            raise Failed(f"stand-in: enroot {command or '(no command)'} is not modelled")
    except Failed as exc:
        text = str(exc)
        log(text.rstrip("\n") if text.startswith("Usage") else f"[ERROR] {text}")
        return 1
    return 0
