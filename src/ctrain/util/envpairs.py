"""``NAME=VALUE`` pairs as ctrain takes them for a container (--env, --env-file, a build's
--build-arg): one pair, or the lines of a file. Pure."""

from __future__ import annotations

import re

from ctrain.errors import SpecError
from ctrain.util.secrets import masked

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_env_pair(text: str, where: str = "--env") -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not _KEY.match(key):
        shown = f"{key}={masked(key, value)}" if sep else text
        raise SpecError(f"{where} {shown!r} is not NAME=VALUE", "write --env NAME=VALUE")
    return key, value


def parse_env_file(text: str, name: str) -> dict[str, str]:
    """``NAME=VALUE`` lines; blank lines and ``#`` comments skipped."""
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, value = parse_env_pair(stripped.removeprefix("export "), f"{name}:{number}:")
        pairs[key] = value
    return pairs
