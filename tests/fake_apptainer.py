"""The one stand-in for ``apptainer`` (and ``singularity``) in ctrain's tests.

``install(bin_dir)`` puts this file in a fake bin dir, run by the tests' interpreter. Each call
appends a JSON line to $FAKE_APPTAINER_LOG (``calls`` reads them): argv, pid, env (the
APPTAINER*/SINGULARITY* variables it got) and, for exec/run/shell, container: what the command
would get (image, command, cwd, binds, overlays, nv, env). Steering: FAKE_APPTAINER_EXIT (the
command's exit status), FAKE_APPTAINER_FAIL (pull, inspect or build fails with 255),
FAKE_APPTAINER_BAD=1 (pull and build write a non-SIF), FAKE_APPTAINER_DELAY (seconds a pull
takes), FAKE_APPTAINER_SIZE (bytes a pull writes).

Modelled, from /work/shared/apptainer-facts.md (Apptainer 1.3/1.4; run as ``singularity`` it
is SingularityCE: SINGULARITYENV_, SINGULARITY_CACHEDIR, ~/.singularity/cache):
- flags end at the first positional argument; ``--flag=value``; a wrong number of positional
  arguments, or a flag not in FLAG_TEXT (unknown, or not modelled), is fatal: exit 255;
- exec IMAGE CMD... (2+), run IMAGE (1+), shell IMAGE (warns on more): --bind lists of
  src[:dst[:ro|rw]] (relative src made absolute, missing src fatal), --overlay PATH[:ro] (must
  exist; one writable at most, not with --writable-tmpfs), --pwd/--cwd (must exist), remote
  images cached in the cache dir (``docker-daemon://`` refused);
- container env: --cleanenv keeps TERM and the proxies, LANG=C; otherwise the host's minus HOME,
  PATH, LD_LIBRARY_PATH, APPTAINER_*, SINGULARITY_*; then <PREFIX>ENV_* shell-evaluated
  (``$``, backticks, ``\\``) unless --no-eval, _PATH/_PREPEND_PATH/_APPEND_PATH, HOME refused,
  LD_LIBRARY_PATH extended; ``--env`` pairs (split at commas) last;
- pull [DEST] URI: --force, --dir, --name, --disable-cache, ``name_tag.sif``, "Image file
  already exists"; the image is also kept in the cache (cache/oci-tmp/<digest>);
- build TARGET SPEC: def-file header keys; a --build-arg no ``{{ NAME }}`` uses is fatal without
  --warn-unused-build-args; inspect IMAGE: a SIF header (magic, version 01);
  overlay create PATH: --size whole MiB >= 64 (default 64); an existing PATH is fatal.
Not modelled yet: the command is not run (no signals, no 128+N); pull writes DEST bit by bit
where Apptainer copies from its cache through DEST_DIR/tmp-copy-* and renames; no build-temp-*
in APPTAINER_TMPDIR; --env-file, --mount, %files, overlay locks, real ext3, SIF descriptors,
inspect's labels and JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import time
from pathlib import Path

HEADER = struct.Struct("<32s10s3s3s16s8q")
DATA_OFFSET = 4096
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROXIES = ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy")
DROPPED = ("HOME", "PATH", "LD_LIBRARY_PATH")  # never passed from the host
OWN = ("APPTAINER", "SINGULARITY")  # the program's own variables
DEF_KEYS = (
    "bootstrap from includecmd mirrorurl updateurl osversion include library registry namespace "
    "stage product user regcode productpgp registerurl modules fingerprints confurl setopt"
)
ACTION = (
    "--cleanenv -e --nv --writable-tmpfs --no-eval",
    "--bind -B --overlay -o --env --cwd --pwd",
)
FLAG_TEXT = {  # verb: (modelled flags without a value, with a value); Apptainer has more
    "exec": ACTION,
    "run": ACTION,
    "shell": ACTION,
    "pull": ("--force -F --disable-cache", "--dir --name"),
    "build": ("--force -F --fakeroot -f --warn-unused-build-args", "--build-arg"),
    "inspect": ("", ""),
    "overlay create": ("--sparse -S", "--size -s"),
}
FLAGS = {verb: (set(b.split()), set(v.split())) for verb, (b, v) in FLAG_TEXT.items()}
POSITIONALS = {"exec": 2, "run": 1, "shell": 1, "pull": 1, "build": 2, "inspect": 1}
MAX_POSITIONALS = {"pull": 2, "build": 2, "inspect": 1, "overlay create": 1}


class Fatal(Exception):
    """Apptainer's own failure: one FATAL line, exit 255."""


Flags = list[tuple[str, str]]


def parse(verb: str, args: list[str]) -> tuple[Flags, list[str]]:
    """(flags as (name, value), positionals); flags end at the first positional or ``--``."""
    booleans, valued = FLAGS[verb]
    flags: Flags = []
    rest = list(args)
    while rest and rest[0].startswith("-") and rest[0] != "-":
        arg = rest.pop(0)
        if arg == "--":
            break
        name, eq, value = arg.partition("=")
        if name in valued and not eq:
            if not rest:
                raise Fatal(f"flag needs an argument: {name}")
            value = rest.pop(0)
        elif name not in booleans | valued:
            raise Fatal(f"{verb} {name}: unknown flag, or one this stand-in does not model")
        flags.append((name, value if name in valued else "true"))
    least, most = POSITIONALS.get(verb, 1), MAX_POSITIONALS.get(verb, len(rest) or 1)
    if not least <= len(rest) <= max(most, least):
        raise Fatal(f'Error for command "{verb}": wrong number of arguments: {rest}')
    return flags, rest


def values(flags: Flags, *names: str) -> list[str]:
    return [value for name, value in flags if name in names]


def is_ce() -> bool:
    return Path(sys.argv[0]).name == "singularity"


def cache_root(environ: dict[str, str]) -> Path:
    given = environ.get("SINGULARITY_CACHEDIR" if is_ce() else "APPTAINER_CACHEDIR")
    given = given or environ.get("SINGULARITY_CACHEDIR")  # Apptainer's legacy fallback
    home = Path(environ.get("HOME", "/"))
    return Path(given) if given else home / (".singularity" if is_ce() else ".apptainer") / "cache"


def sif_bytes(ref: str, payload: int) -> tuple[bytes, bytes]:
    """(header block, payload) of a small valid-looking SIF image for ``ref``."""
    header = HEADER.pack(
        b"#!/usr/bin/env run-singularity\n", b"SIF_MAGIC\x00", b"01\x00", b"02\x00",
        b"0123456789abcdef", 1700000000, 1700000000, 47, 48, HEADER.size, 0, DATA_OFFSET, payload,
    )  # fmt: skip
    body = (ref.encode() * (payload // max(1, len(ref)) + 1))[:payload]
    return header.ljust(DATA_OFFSET, b"\x00"), body


def is_sif(path: Path) -> bool:
    with path.open("rb") as handle:
        head = handle.read(HEADER.size)
    return head[32:42] == b"SIF_MAGIC\x00" and head[42:45] == b"01\x00"


def cache_remote(ref: str, environ: dict[str, str], payload: int) -> None:
    """A remote image goes through the cache: cache/oci-tmp/<digest> (docker) or cache/net."""
    if ref.startswith(("docker-daemon://", "docker-daemon:")):
        if ref.startswith("docker-daemon://"):
            raise Fatal(f"Unable to handle {ref} uri: invalid reference format")
        return
    kind = "oci-tmp" if ref.startswith("docker://") else "net"
    entry = cache_root(environ) / "cache" / kind / hashlib.sha256(ref.encode()).hexdigest()
    entry.parent.mkdir(parents=True, exist_ok=True)
    header, body = sif_bytes(ref, payload)
    entry.write_bytes(header + body)


def parse_binds(specs: list[str], cwd: Path) -> list[dict[str, object]]:
    binds: list[dict[str, object]] = []
    for spec in specs:
        for one in re.split(r"(?<!\\),", spec):
            parts = re.split(r"(?<!\\):", one)
            src = Path(parts[0].replace("\\,", ",").replace("\\:", ":"))
            src = src if src.is_absolute() else cwd / src
            if not src.exists():
                raise Fatal(f"container creation failed: mount {src}: no such file or directory")
            dst = parts[1] if len(parts) > 1 else str(src)
            opts = parts[2:] or ["rw"]
            if any(opt not in ("ro", "rw") and "=" not in opt for opt in opts):
                raise Fatal(f"bind option {opts} is not valid in {one!r}")
            binds.append({"src": str(src), "dst": dst, "readonly": "ro" in opts})
    return binds


def parse_overlays(specs: list[str], writable_tmpfs: bool) -> list[dict[str, object]]:
    overlays: list[dict[str, object]] = []
    for spec in specs:
        path, _, mode = spec.partition(":")
        if not Path(path).exists():
            raise Fatal(f"overlay {path}: no such file or directory")
        overlays.append({"path": path, "readonly": mode == "ro"})
    writable = [o for o in overlays if not o["readonly"]]
    if len(writable) > 1:
        raise Fatal("you can't specify more than one writable overlay")
    if writable and writable_tmpfs:
        raise Fatal("you can't use --writable-tmpfs with a writable overlay")
    return overlays


def base_env(environ: dict[str, str], cleanenv: bool) -> dict[str, str]:
    if cleanenv:
        keep = ("TERM", *PROXIES, *(p.upper() for p in PROXIES))
        env = {k: environ[k] for k in keep if k in environ} | {"LANG": "C"}
    else:
        env = {k: v for k, v in environ.items() if k not in DROPPED and not k.startswith(OWN)}
    return {**env, "HOME": environ.get("HOME", "/"), "PATH": DEFAULT_PATH}


def evaluate(env: dict[str, str], injected: dict[str, str], no_eval: bool) -> dict[str, str]:
    """Each value as the container's start-up shell leaves it: double-quoted, only ``"``
    escaped, so ``$``, backticks and ``\\`` are interpreted (verbatim with --no-eval)."""
    if no_eval or not injected:
        return dict(injected)
    lines = [f'{k}="{v.replace(chr(34), chr(92) + chr(34))}"' for k, v in injected.items()]
    lines += [f'printf "%s\\0" "${k}"' for k in injected]
    done = subprocess.run(["/bin/sh", "-c", "\n".join(lines)], env=env, capture_output=True)
    if done.returncode != 0:
        raise Fatal(f"environment injection failed: {done.stderr.decode(errors='replace')}")
    return dict(zip(injected, done.stdout.decode().split("\0")[:-1], strict=True))


def container_env(environ: dict[str, str], flags: Flags) -> dict[str, str]:
    cleanenv = bool(values(flags, "--cleanenv", "-e"))
    env = base_env(environ, cleanenv)
    prefixes = ("SINGULARITYENV_",) if is_ce() else ("APPTAINERENV_", "SINGULARITYENV_")
    injected: dict[str, str] = {}
    for prefix in reversed(prefixes):
        for key, value in environ.items():
            if key.startswith(prefix) and key != prefix:
                name = key[len(prefix) :]
                if prefix == "SINGULARITYENV_" and not is_ce():
                    preferred = f"Environment variable {key} is set, but APPTAINERENV_{name}"
                    print(f"INFO:    {preferred} is preferred", file=sys.stderr)
                injected[name] = value
    if "HOME" in injected:
        warning = f"Overriding HOME environment variable with {prefixes[0]}HOME is not permitted"
        print(f"WARNING: {warning}", file=sys.stderr)
        del injected["HOME"]
    injected = evaluate(env, injected, bool(values(flags, "--no-eval")))
    for pair in ",".join(values(flags, "--env")).split(",") if values(flags, "--env") else []:
        key, eq, value = pair.partition("=")
        if not eq:
            raise Fatal(f"--env {pair!r}: must be KEY=VALUE")
        injected[key] = value
    path = injected.pop("PATH", env["PATH"])
    path = ":".join(filter(None, [injected.pop("PREPEND_PATH", ""), path]))
    env["PATH"] = ":".join(filter(None, [path, injected.pop("APPEND_PATH", "")]))
    if "LD_LIBRARY_PATH" in injected:
        injected["LD_LIBRARY_PATH"] += ":/.singularity.d/libs"
    return {**env, **injected}


def action(verb: str, args: list[str], environ: dict[str, str]) -> tuple[int, dict[str, object]]:
    flags, rest = parse(verb, args)
    if verb == "shell" and len(rest) > 1:
        print(f"WARNING: shell ignores its extra arguments {rest[1:]}", file=sys.stderr)
        rest = rest[:1]
    image, command = rest[0], rest[1:]
    if re.match(r"^[a-z-]+:", image):
        cache_remote(image, environ, 4096)
    elif not Path(image).exists():
        raise Fatal(f"could not open image {image}: no such file or directory")
    cwd = (values(flags, "--cwd", "--pwd") or [os.getcwd()])[-1]
    if not Path(cwd).is_dir():
        raise Fatal(f"could not set working directory {cwd}: no such directory")
    return int(environ.get("FAKE_APPTAINER_EXIT", "0")), {
        "image": image,
        "command": command,
        "cwd": cwd,
        "binds": parse_binds(values(flags, "--bind", "-B"), Path.cwd()),
        "overlays": parse_overlays(
            values(flags, "--overlay", "-o"), bool(values(flags, "--writable-tmpfs"))
        ),
        "nv": bool(values(flags, "--nv")),
        "env": container_env(environ, flags),
    }


def pull(args: list[str], environ: dict[str, str]) -> int:
    flags, rest = parse("pull", args)
    ref = rest[-1]
    name = values(flags, "--name") or rest[:-1]
    if not name:
        base = re.sub(r"^[a-z-]+:/*", "", ref).rsplit("/", 1)[-1]
        name = [base.replace(":", "_") + ("" if ":" in base else "_latest") + ".sif"]
    dest = Path(*values(flags, "--dir"), name[-1])
    if environ.get("FAKE_APPTAINER_FAIL") == "pull":
        raise Fatal(f"Unable to pull {ref}: manifest unknown")
    if dest.exists() and not values(flags, "--force", "-F"):
        raise Fatal(f"Image file already exists: {str(dest)!r} - will not overwrite")
    payload = int(environ.get("FAKE_APPTAINER_SIZE", "65536"))
    if not values(flags, "--disable-cache"):
        cache_remote(ref, environ, payload)
    header, body = sif_bytes(ref, payload)
    if environ.get("FAKE_APPTAINER_BAD") == "1":
        header = b"<html>not an image</html>".ljust(DATA_OFFSET)
    delay, chunks = float(environ.get("FAKE_APPTAINER_DELAY", "0")), 20
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


def check_definition(recipe: Path, build_args: dict[str, str], warn_unused: bool) -> None:
    text = recipe.read_text(encoding="utf-8")
    header = text.split("\n%", 1)[0]
    for line in header.splitlines():
        key = line.split(":", 1)[0].strip().lower()
        if line.strip() and not line.lstrip().startswith("#") and key not in DEF_KEYS.split():
            raise Fatal(f"invalid header keyword found: {key}")
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", "\n".join(lines)))
    unused = sorted(set(build_args) - used)
    if unused and not warn_unused:
        raise Fatal(f"unused build args: {', '.join(unused)}")


def build(args: list[str], environ: dict[str, str]) -> int:
    flags, (dest_text, spec) = parse("build", args)
    build_args = dict(pair.partition("=")[::2] for pair in values(flags, "--build-arg"))
    recipe = Path(spec)
    if recipe.is_file() and not is_sif(recipe):
        check_definition(recipe, build_args, bool(values(flags, "--warn-unused-build-args")))
    elif not recipe.exists() and not re.match(r"^[a-z-]+:", spec):
        raise Fatal(f"unable to build from {spec}: no such file, directory or URI")
    dest = Path(dest_text)
    if dest.exists() and not values(flags, "--force", "-F"):
        raise Fatal(f"build target '{dest}' already exists and no terminal to confirm")
    if environ.get("FAKE_APPTAINER_FAIL") == "build":
        raise Fatal("While performing build: conveyor failed")
    header, body = sif_bytes(spec, 4096)
    if environ.get("FAKE_APPTAINER_BAD") == "1":
        header = b"not an image".ljust(DATA_OFFSET)
    dest.write_bytes(header + body)
    print(f"INFO:    Build complete: {dest}", file=sys.stderr)
    return 0


def inspect(args: list[str], environ: dict[str, str]) -> int:
    _, (image,) = parse("inspect", args)
    if environ.get("FAKE_APPTAINER_FAIL") == "inspect" or not is_sif(Path(image)):
        raise Fatal(f"could not open image {image}: invalid SIF file")
    print("org.label-schema.schema-version: 1.0")
    return 0


def overlay_create(args: list[str]) -> int:
    flags, (path_text,) = parse("overlay create", args)
    size_text = (values(flags, "--size", "-s") or ["64"])[-1]
    if not size_text.isdigit() or int(size_text) < 64:
        raise Fatal(f"overlay size must be an integer of at least 64 MiB, got {size_text!r}")
    path = Path(path_text)
    if path.exists():
        raise Fatal(f"{path} already exists and is not a SIF image")
    with path.open("xb") as handle:
        os.truncate(handle.fileno(), int(size_text) * 1024 * 1024)
    return 0


def dispatch(argv: list[str], environ: dict[str, str]) -> int:
    """Run one call; exec/run/shell log what the container would get, the others log first
    (a slow pull is visible in the log while it runs)."""
    own = {k: v for k, v in environ.items() if k.startswith(OWN)}
    line: dict[str, object] = {"argv": argv, "pid": os.getpid(), "env": own}
    verb = argv[0] if argv else ""
    if verb in ("exec", "run", "shell"):
        try:
            status, line["container"] = action(verb, argv[1:], environ)
        finally:
            log(environ, line)
        return status
    log(environ, line)
    if argv == ["--version"]:
        print("singularity-ce version 4.1.5" if is_ce() else "apptainer version 1.3.6")
        return 0
    if argv[:2] == ["overlay", "create"]:
        return overlay_create(argv[2:])
    if verb not in ("pull", "build", "inspect"):
        raise Fatal(f"unknown command {argv}")
    return {"pull": pull, "build": build, "inspect": inspect}[verb](argv[1:], environ)


def log(environ: dict[str, str], line: dict[str, object]) -> None:
    with open(environ["FAKE_APPTAINER_LOG"], "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def main(argv: list[str]) -> int:
    try:
        return dispatch(argv, dict(os.environ))
    except Fatal as exc:
        print(f"FATAL:   {exc}", file=sys.stderr)
        return 255


def install(bin_dir: Path, name: str = "apptainer") -> Path:
    """Put this stand-in in ``bin_dir`` under ``name``, run by the tests' interpreter."""
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
