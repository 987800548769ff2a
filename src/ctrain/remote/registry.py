"""The named clusters, kept in ``$XDG_CONFIG_HOME/ctrain/remotes.toml`` (``~/.config`` when
XDG_CONFIG_HOME is unset): one table per cluster. The file is ctrain's to write (``ctrain
remote add|remove``); the user's own ``~/.ssh/config`` decides how the host is reached.

A file that is not as ctrain writes it is refused with its path and line, never rewritten.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from typing import NamedTuple

from ctrain.errors import ConfigError, UsageError

DEFAULT_WORKDIR = "ctrain-jobs"  # under the login's home on the cluster
DEFAULT_CTRAIN = "ctrain"  # found on the cluster's PATH
FIELDS = ("host", "workdir", "ctrain", "ssh_config")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_HOST = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*@)?[A-Za-z0-9_.:\[\]-]+$")


class Remote(NamedTuple):
    name: str
    host: str  # what ssh is given: an alias of ~/.ssh/config, HOST or USER@HOST
    workdir: str = DEFAULT_WORKDIR  # where submissions go on the cluster (relative: to $HOME)
    ctrain: str = DEFAULT_CTRAIN  # the cluster's ctrain command
    ssh_config: str = ""  # an ssh config file given to ssh with -F; "": ssh's own


def remotes_path(environ: Mapping[str, str]) -> str:
    xdg = environ.get("XDG_CONFIG_HOME") or os.path.join(environ.get("HOME", "~"), ".config")
    return os.path.join(xdg, "ctrain", "remotes.toml")


def checked(remote: Remote) -> Remote:
    """``remote`` if every field can be used as it is; else a UsageError with the fix."""
    if not _NAME.match(remote.name):
        raise UsageError(
            f"remote name {remote.name!r} is not a plain name",
            "use letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    if not _HOST.match(remote.host) or remote.host.startswith("-"):
        raise UsageError(
            f"remote host {remote.host!r} is not HOST or USER@HOST",
            "give an alias of ~/.ssh/config, a host name, or USER@HOST",
        )
    for field in ("workdir", "ctrain"):
        value = getattr(remote, field)
        if not value.strip() or "\n" in value:
            raise UsageError(f"remote {field} {value!r} is empty", f"give --{field} a path")
    return remote


def parse(text: str, path: str) -> dict[str, Remote]:
    """The clusters of a remotes file's text, checked; an error names the file and line."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{path}: malformed TOML ({exc})",
            "fix the file, or remove it and add the remotes again",
        ) from exc
    found = {}
    for name, table in data.items():
        if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
            raise ConfigError(f"{path}: [{name}] is not a table of strings", "fix the file")
        unknown = sorted(set(table) - set(FIELDS))
        if unknown or "host" not in table:
            raise ConfigError(
                f"{path}: [{name}] has {', '.join(unknown) or 'no host'}",
                f"give each remote {', '.join(FIELDS)} only, host required",
            )
        found[name] = checked(Remote(name=name, **table))
    return found


def render(remotes: Mapping[str, Remote]) -> str:
    """The remotes file's text: tables in name order, fields that differ from the defaults."""
    blocks = []
    for name in sorted(remotes):
        remote = remotes[name]
        lines = [f"[{json.dumps(name)}]"]
        for field in FIELDS:
            value = getattr(remote, field)
            if field == "host" or value != Remote._field_defaults[field]:
                lines.append(f"{field} = {json.dumps(value)}")  # a JSON string is a TOML string
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def read(path: str) -> dict[str, Remote]:
    """The clusters in the file at ``path`` (none when it does not exist)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return parse(handle.read(), path)
    except FileNotFoundError:
        return {}


def write(path: str, remotes: Mapping[str, Remote]) -> None:
    """Replace the file at ``path`` in one step (a stopped write leaves the old file)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(render(remotes))
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def find(remotes: Mapping[str, Remote], name: str, path: str) -> Remote:
    if name not in remotes:
        known = ", ".join(sorted(remotes)) or "none yet"
        raise UsageError(
            f"no remote named {name!r} in {path} (known: {known})",
            f"add it: ctrain remote add {name} [USER@]HOST",
        )
    return remotes[name]
