"""``build`` (facts: "build", "Definition files") and ``inspect`` (facts: "inspect")."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from tests.support.standin import remote
from tests.support.standin.cli import given, parse, values
from tests.support.standin.identity import Fatal, Identity
from tests.support.standin.images import Event, build_temp, cached_image, write_slowly
from tests.support.standin.sif import (
    Metadata,
    is_sif,
    mapping,
    metadata_for,
    read_metadata,
    sif_bytes,
)

DEF_KEYS = {"bootstrap", "from", "includecmd", "mirrorurl", "updateurl", "osversion", "include",
            "library", "registry", "namespace", "stage", "product", "user", "regcode", "productpgp",
            "registerurl", "modules", "fingerprints", "confurl", "setopt"}  # fmt: skip
SECTION = re.compile(r"(?m)^%(\w+)[^\n]*\n((?:(?!%)[^\n]*\n?)*)")


def definition(
    text: str, build_args: dict[str, str], warn_unused: bool, who: Identity
) -> tuple[dict[str, str], dict[str, str]]:
    """(header, sections) of a def file after ``{{ NAME }}`` substitution."""
    sections = dict(SECTION.findall(text))
    if "arguments" in sections and not who.has_flag("--build-arg"):
        raise Fatal("invalid section(s) specified: %arguments")
    defaults = dict(
        line.strip().partition("=")[::2]
        for line in sections.get("arguments", "").splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    )
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", "\n".join(lines)))
    unused = sorted(set(build_args) - used)
    if unused and not warn_unused:
        raise Fatal(f"unused build args: {', '.join(unused)}")
    missing = sorted(used - set(build_args) - set(defaults))
    if missing:
        raise Fatal(
            f"build var {missing[0]} is not defined through either --build-arg "
            "(--build-arg-file) or 'arguments' section"
        )
    known = defaults | build_args
    text = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: known[m.group(1)], text)
    header: dict[str, str] = {}
    for line in text.split("\n%", 1)[0].splitlines():
        key, _, value = line.partition(":")
        if line.strip() and not line.lstrip().startswith("#"):
            if key.strip().lower() not in DEF_KEYS:
                raise Fatal(f"invalid header keyword found: {key.strip().lower()}")
            header[key.strip().lower()] = value.strip()
    return header, dict(SECTION.findall(text))


def base_image(
    header: dict[str, str], who: Identity, environ: dict[str, str], event: Event, plain_http: bool
) -> Metadata:
    """The metadata of the image a definition starts from."""
    bootstrap, source = header.get("bootstrap", "").lower(), header.get("from", "")
    if bootstrap == "localimage":
        return read_metadata(Path(source))
    if bootstrap == "docker":
        prefix = "/".join(filter(None, [header.get("registry"), header.get("namespace")]))
        ref = "docker://" + "/".join(filter(None, [prefix, source]))
        return cached_image(ref, who, environ, False, event, plain_http)[1]
    return {"environment": {"PATH": remote.DEFAULT_PATH}}


def key_value(text: str) -> tuple[str, str] | None:
    """``KEY=VALUE``, both trimmed and non-empty, or None."""
    key, eq, value = text.partition("=")
    return (key.strip(), value.strip()) if eq and key.strip() and value.strip() else None


def read_build_args(flags: list[tuple[str, str]]) -> dict[str, str]:
    """Apptainer's ReadBuildArgs (pkg/build/args): --build-arg-file's KEY=VALUE lines (any other
    line skipped with a warning), then every --build-arg (a malformed one is fatal) over them."""
    found: dict[str, str] = {}
    for path in values(flags, "--build-arg-file")[-1:]:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except OSError as error:
            raise Fatal(f'error while opening file "{path}": {error.strerror}') from None
        for line in lines:
            pair = key_value(line)
            if pair is None:
                print(f'WARNING: Skipping "{line}" in build arg file', file=sys.stderr)
            else:
                found[pair[0]] = pair[1]
    for arg in values(flags, "--build-arg"):
        pair = key_value(arg)
        if pair is None:
            raise Fatal(f'"{arg}" is not a key=value pair')
        found[pair[0]] = pair[1]
    return found


def build(args: list[str], environ: dict[str, str], who: Identity, event: Event) -> int:
    flags, (dest_text, spec) = parse("build", args, who)
    build_args = read_build_args(flags)
    recipe, dest = Path(spec), Path(dest_text)
    if dest.exists() and not values(flags, "--force", "-F"):
        raise Fatal(f"build target '{dest}' already exists and no terminal to confirm")
    with build_temp(who, environ, values(flags, "--tmpdir")):
        if recipe.is_file() and not is_sif(recipe):
            text = recipe.read_text(encoding="utf-8")
            warn = bool(values(flags, "--warn-unused-build-args"))
            header, sections = definition(text, build_args, warn, who)
            base = base_image(header, who, environ, event, given(flags, "--no-https"))
            env = mapping(base, "environment")
            labels = dict(
                line.strip().partition(" ")[::2] for line in sections.get("labels", "").splitlines()
                if line.strip()
            )  # fmt: skip
            metadata = metadata_for(env, labels, text, sections.get("environment", ""))
        elif recipe.is_file():
            metadata = read_metadata(recipe)
        elif remote.is_uri(spec):
            metadata = cached_image(spec, who, environ, False, event, given(flags, "--no-https"))[1]
        else:
            raise Fatal(f"unable to build from {spec}: no such file, directory or URI")
        if environ.get("FAKE_APPTAINER_FAIL") == "build":
            raise Fatal("While performing build: conveyor failed")
        head, body = sif_bytes(spec, 4096, metadata)
        write_slowly(dest, head, body, environ)
    print(f"INFO:    Build complete: {dest}", file=sys.stderr)
    return 0


def inspect(args: list[str], environ: dict[str, str], who: Identity) -> int:
    flags, (image,) = parse("inspect", args, who)
    if environ.get("FAKE_APPTAINER_FAIL") == "inspect":
        raise Fatal(f"could not open image {image}: failed to inspect")
    metadata = read_metadata(Path(image))
    labels = mapping(metadata, "labels")
    if values(flags, "--json", "-j", "--all"):
        attributes = {"labels": labels, "deffile": metadata.get("deffile") or None}
        environment = {"/.singularity.d/env/90-environment.sh": metadata.get("script") or None}
        attributes["environment"] = {k: v for k, v in environment.items() if v} or None
        data = {"attributes": {k: v for k, v in attributes.items() if v}}
        print(json.dumps({"data": data, "type": "container"}, indent=2))
    elif values(flags, "--environment", "-e"):
        print(metadata.get("script") or "")
    else:
        for key, value in labels.items():
            print(f"{key}: {value}")
    return 0
