"""The container environment, built Apptainer's way (facts: "Environment"): the base (host or
--cleanenv), then the image's env scripts in order (10-docker2singularity.sh: PATH forced, other
OCI Env values only where unset; 90-environment.sh: the %environment script; 99-base.sh:
LD_LIBRARY_PATH and PS1), then APPTAINERENV_* and --env injected through a shell script with
Apptainer's quoting, all evaluated by one /bin/sh that then execs the command."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.support.standin.cli import Flags, given, values
from tests.support.standin.identity import Fatal, Identity
from tests.support.standin.remote import DEFAULT_PATH
from tests.support.standin.sif import Metadata, mapping

PROXIES = ("http_proxy", "https_proxy", "ftp_proxy", "all_proxy", "no_proxy")
DROPPED = ("HOME", "PATH", "LD_LIBRARY_PATH")  # never passed from the host
OWN = ("APPTAINER", "SINGULARITY")  # the program's own variables, never passed
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LIBS = "/.singularity.d/libs"
# what the real 1.4.5 prints when its injection script does not parse (line and column left out)
INJECT_BROKEN = 'source: /.inject-apptainer-env.sh: reached EOF without closing quote "'
FIND_COMMAND = (  # as Go's exec.LookPath: an executable file on PATH, shell builtins do not count
    'case "$1" in */*) [ -x "$1" ] ;; *) __sf=; IFS=:',
    '  for __sd in $PATH; do [ -f "$__sd/$1" ] && [ -x "$__sd/$1" ] && __sf=1 && break; done',
    '  unset IFS __sd; [ -n "$__sf" ] ;; esac || {',
    '  echo "FATAL:   \\"$1\\": executable file not found in \\$PATH" >&2; exit 255; }',
    "unset __sf",
)


def base_env(environ: dict[str, str], cleanenv: bool) -> dict[str, str]:
    if cleanenv:
        keep = ("TERM", *PROXIES, *(p.upper() for p in PROXIES))
        env = {k: environ[k] for k in keep if k in environ} | {"LANG": "C"}
    else:
        env = {k: v for k, v in environ.items() if k not in DROPPED and not k.startswith(OWN)}
    return {**env, "HOME": environ.get("HOME", "/"), "PATH": DEFAULT_PATH}


def literal(value: str) -> str:
    """``value`` double-quoted so that the shell leaves it as it is."""
    return '"' + re.sub(r'([\\"$`])', r"\\\1", value) + '"'


def injected_quote(value: str, no_eval: bool) -> str:
    """Apptainer's quoting of an injected value: double quotes with only ``"`` escaped (so
    ``$``, backticks and ``\\`` are interpreted), or single quotes with --no-eval."""
    if no_eval:
        return "'" + value.replace("'", "'\"'\"'") + "'"
    return '"' + value.replace('"', '\\"') + '"'


def image_script(metadata: Metadata) -> list[str]:
    lines = []
    for key, value in mapping(metadata, "environment").items():
        if key == "PATH":
            lines.append(f"export PATH={literal(value)}")
        else:
            lines.append(f'export {key}="${{{key}:-{literal(value)[1:-1]}}}"')
    lines.append(str(metadata.get("script") or ""))
    lines.append(f'LD_LIBRARY_PATH="${{LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}}{LIBS}"')
    lines.append('[ -n "${PS1:-}" ] || PS1="Apptainer> "; export LD_LIBRARY_PATH PS1')
    return lines


def env_pairs(text: str) -> list[tuple[str, str]]:
    """One --env value as pflag's map flag reads it: one ``=``: one pair (commas kept);
    more: comma-separated pairs."""
    count = text.count("=")
    if count == 0:
        raise Fatal(f'invalid argument {text!r} for "--env" flag: must be formatted as key=value')
    if count == 1:
        key, _, value = text.strip('"').partition("=")
        return [(key, value)]
    import csv

    fields = next(csv.reader([text]))
    return [(key, value) for key, _, value in (field.partition("=") for field in fields)]


def legacy_env(key: str, value: str, preferred: str, environ: dict[str, str]) -> None:
    """What Apptainer says of a SINGULARITYENV_ variable (the real 1.4.5's lines, measured):
    an INFO when alone, nothing beside an equal APPTAINERENV_ one, two WARNINGs beside a
    different one (which wins)."""
    other = environ.get(preferred)
    if other is None:
        say = f"Environment variable {key} is set, but {preferred} is preferred"
        print(f"INFO:    {say}", file=sys.stderr)
    elif other != value:
        name = preferred.removeprefix("APPTAINERENV_")
        print(f"WARNING: {key} and {preferred} have different values, using the latter\n"
              f"WARNING: Skipping environment variable [{key}={value}], {name} is already "
              f"overridden with different value [{other}]", file=sys.stderr)  # fmt: skip


def requested(who: Identity, environ: dict[str, str], flags: Flags) -> dict[str, str]:
    """The variables to inject, by name: <PREFIX>ENV_*, then --env (which wins)."""
    injected: dict[str, str] = {}
    for prefix in reversed(who.env_prefixes):  # the preferred prefix wins
        for key, value in environ.items():
            if key.startswith(prefix) and key != prefix:
                name = key[len(prefix) :]
                if prefix == "SINGULARITYENV_" and not who.ce:
                    legacy_env(key, value, f"APPTAINERENV_{name}", environ)
                injected[name] = value
    for text in values(flags, "--env"):
        injected |= dict(env_pairs(text))
    if "HOME" in injected:
        warning = f"Overriding HOME environment variable with {who.env_prefixes[0]}HOME is"
        print(f"WARNING: {warning} not permitted", file=sys.stderr)
        del injected["HOME"]
    for name in [name for name in injected if not NAME.match(name)]:
        print(f"WARNING: Ignoring invalid environment variable name {name!r}", file=sys.stderr)
        del injected[name]
    return injected


def injection_script(injected: dict[str, str], env_files: list[str], no_eval: bool) -> list[str]:
    """The --env-file files sourced, then the injected variables as Apptainer's
    /.inject-apptainer-env.sh: when that script does not parse (an evaluated value ending in
    ``\\``), none of its variables is set, an error is printed and the command still runs (the
    real 1.4.5, measured by tests/integration/test_standin_differential.py)."""
    lines = [f"set -a; . {literal(path)}; set +a" for path in env_files]
    special = {k: injected.pop(k) for k in ("PATH", "PREPEND_PATH", "APPEND_PATH") if k in injected}
    inject = []
    for key, value in injected.items():
        if key == "LD_LIBRARY_PATH":
            value += ":" + LIBS
        inject.append(f"export {key}={injected_quote(value, no_eval)}")
    if "PATH" in special:
        inject.append(f"export PATH={injected_quote(special['PATH'], no_eval)}")
    if "PREPEND_PATH" in special:
        inject.append(f'export PATH={injected_quote(special["PREPEND_PATH"], no_eval)}:"$PATH"')
    if "APPEND_PATH" in special:
        inject.append(f'export PATH="$PATH":{injected_quote(special["APPEND_PATH"], no_eval)}')
    if not inject:
        return lines
    return [
        *lines,
        f"standin_inject={literal(chr(10).join(inject))}",
        'if /bin/sh -n -c "$standin_inject" 2>/dev/null; then eval "$standin_inject"; else',
        f"  echo {literal(INJECT_BROKEN)} >&2; fi",
        "unset standin_inject",
    ]


def runtime_vars(who: Identity, image: str) -> list[str]:
    """What Apptainer sets about the container itself (APPTAINER_CONTAINER, _NAME)."""
    name = image.rstrip("/").rsplit("/", 1)[-1]
    prefixes = ("SINGULARITY_",) if who.ce else ("APPTAINER_", "SINGULARITY_")
    return [f"export {p}CONTAINER={literal(image)} {p}NAME={literal(name)}" for p in prefixes]


def start_script(
    who: Identity, environ: dict[str, str], flags: Flags, metadata: Metadata, image: str
) -> tuple[dict[str, str], str]:
    """(the environment /bin/sh starts with, the script it runs before ``exec "$@"``); the
    script writes the final environment, NUL-separated, to fd 3 and closes it."""
    cleanenv = given(flags, "--cleanenv", "-e")
    cleanenv = cleanenv or who.enabled(environ, "CLEANENV")
    no_eval = given(flags, "--no-eval") or (
        who.has_flag("--no-eval") and who.enabled(environ, "NO_EVAL")
    )
    files = [str(Path(name).absolute()) for name in values(flags, "--env-file")]
    for name in files:
        if not Path(name).is_file():
            raise Fatal(f"while processing {name}: no such file or directory")
    if not who.ce and who.version < (1, 4, 0) and len(files) > 1:
        raise Fatal("--env-file can be given only once before Apptainer 1.4")
    injected = requested(who, environ, flags)
    lines = [
        *image_script(metadata),
        *injection_script(injected, files, no_eval),
        *runtime_vars(who, image),
        "/usr/bin/env -0 >&3; exec 3>&-",
        *FIND_COMMAND,
        'exec "$@"',
    ]
    return base_env(environ, cleanenv), "\n".join(lines) + "\n"
