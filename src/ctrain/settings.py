"""Every setting's one precedence: flag > CTRAIN_* env > config file > default (the rows are
settings_table.py's).

Config files are TOML with top-level keys named as the settings: ``./ctrain.toml`` first, then
``$XDG_CONFIG_HOME/ctrain/config.toml`` (``~/.config`` when XDG_CONFIG_HOME is unset).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import NamedTuple

from ctrain.errors import ConfigError
from ctrain.settings_table import BY_NAME, SETTINGS, Setting, Settings, Value


class Resolved(NamedTuple):
    value: Value
    source: str  # "flag", "env CTRAIN_X", "file PATH:LINE" or "default"


def config_files(environ: Mapping[str, str], cwd: str | os.PathLike[str]) -> list[str]:
    """Config files in precedence order, the first one winning. (os.path, not pathlib: this
    module is on `ctrain launch`'s start-up path.)"""
    xdg = environ.get("XDG_CONFIG_HOME") or os.path.join(environ.get("HOME", "~"), ".config")
    return [os.path.join(cwd, "ctrain.toml"), os.path.join(xdg, "ctrain", "config.toml")]


def _line_of(text: str, key: str) -> int:
    for number, line in enumerate(text.splitlines(), start=1):
        if re.match(rf"\s*([\"']?){re.escape(key)}\1\s*=", line):  # key, "key" or 'key'
            return number
    return 1


def _from_toml(setting: Setting, raw: object) -> Value:
    if isinstance(setting.default, bool) or setting.is_flag:
        if not isinstance(raw, bool):
            raise ValueError("must be true or false")
        return raw
    if setting.is_list:
        if not isinstance(raw, list) or not all(isinstance(i, str) for i in raw):
            raise ValueError("must be a list of strings")
        return tuple(raw)
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise ValueError("must be a string or an integer")
    return setting.parse(str(raw))


def read_config(path: str) -> dict[str, Resolved]:
    """Settings from one TOML file; a malformed file or value names the file and line."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", "fix or remove the file") from exc
    if sys.version_info >= (3, 11):  # imported here: most runs have no config file
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        position = re.search(r"line (\d+)", str(exc))
        line = position.group(1) if position else "1"
        raise ConfigError(
            f"{path}:{line}: malformed TOML ({exc})", "write settings as key = value"
        ) from exc
    found_settings: dict[str, Resolved] = {}
    for key, raw in data.items():
        line = _line_of(text, key)
        setting = BY_NAME.get(key)
        if setting is None:
            known = ", ".join(BY_NAME)
            raise ConfigError(f"{path}:{line}: unknown setting {key!r}", f"use one of: {known}")
        try:
            value = _from_toml(setting, raw)
        except ValueError as exc:
            raise ConfigError(f"{path}:{line}: {key} {exc}", f"correct {key} in {path}") from exc
        found_settings[key] = Resolved(value, f"file {path}:{line}")
    return found_settings


def resolve(
    flags: Mapping[str, Value], environ: Mapping[str, str], cwd: str | os.PathLike[str]
) -> Settings:
    """The effective value of every setting and where it came from."""
    from_files: dict[str, Resolved] = {}
    for path in reversed(config_files(environ, cwd)):
        from_files.update(read_config(path))
    result: dict[str, Resolved] = {}
    for setting in SETTINGS:
        flag = flags.get(setting.name)
        if flag is not None and flag != ():
            result[setting.name] = Resolved(flag, "flag")
        elif setting.env in environ:
            try:
                value = setting.parse(environ[setting.env])
            except ValueError as exc:
                raise ConfigError(
                    f"{setting.env}={environ[setting.env]!r}: {exc}",
                    f"correct or unset {setting.env}",
                ) from exc
            result[setting.name] = Resolved(value, f"env {setting.env}")
        elif setting.name in from_files:
            result[setting.name] = from_files[setting.name]
        else:
            result[setting.name] = Resolved(setting.default, "default")
    values = {name: resolved.value for name, resolved in result.items()}
    sources = {name: resolved.source for name, resolved in result.items()}
    return Settings(**values, sources=sources)  # type: ignore[arg-type]  # each parser's type


def parse_flag(name: str, text: str | None) -> Value:
    """Validate a flag value with its setting's parser; None means "not given"."""
    if text is None:
        return None
    try:
        return BY_NAME[name].parse(text)
    except ValueError as exc:
        raise ConfigError(f"{BY_NAME[name].option} {text!r}: {exc}", "correct the flag") from exc
