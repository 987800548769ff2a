"""What the command modules share: options for settings, resolving them, ``-- CMD`` parsing.

Every option that sets a setting is made here, from its row in ctrain.settings_table (its
spellings, kind, choices, metavar and help), by ``setting_option``: a command names the setting,
and at most says the option's help and shown default its own way. Defining a command imports no
library module (``ctrain --help`` loads every command module): ctrain.settings_table imports
only ctrain's ground floor (names, profile_window).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from ctrain.settings_table import BY_NAME, Setting, Settings, Value

F = TypeVar("F", bound=Callable[..., Any])


class SettingOption(click.Option):
    """An option that sets a setting; ``setting`` names its row (the settings page reads it)."""

    def __init__(self, *args: Any, setting: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting


def written(value: Value) -> str:
    """A setting's value as a user writes it: ``none``, ``true``/``false``, a list
    comma-separated (as in its variable)."""
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    return str(value)


def setting_help(row: Setting, lead: str | None = None, shown_default: str | None = None) -> str:
    """An option's help: what it does (the row's help, or ``lead`` where the command says it
    its own way; "(repeatable)" for a list), then ``[env CTRAIN_X; setting x; default D]`` (D:
    the row's default as a user writes it, or ``shown_default`` where the command has another)."""
    text = lead or row.help[:1].upper() + row.help[1:]
    repeatable = " (repeatable)" if row.is_list else ""
    default = written(row.default) if shown_default is None else shown_default
    return f"{text}{repeatable}. [env {row.env}; setting {row.name}; default {default}]"


def setting_option(
    name: str, *, help: str | None = None, shown_default: str | None = None
) -> Callable[[F], F]:
    """The Click option of the setting ``name``, as its row says: its spellings (``option``,
    ``short``); a flag for a true/false setting (given: "true", or "false" for an inverted one,
    ``--no-...``), a choice, a repeatable option for a list (given: the values), or a value;
    unset, None (the setting's precedence then decides). ``help`` and ``shown_default`` are
    ``setting_help``'s."""
    row = BY_NAME[name]
    kwargs: dict[str, Any] = {
        "default": None,
        "metavar": row.metavar,
        "help": setting_help(row, help, shown_default),
    }
    if row.is_flag:
        kwargs |= {"is_flag": True, "flag_value": "false" if row.inverted else "true"}
    elif row.is_list:
        kwargs["multiple"] = True
    elif row.choices:
        kwargs["type"] = click.Choice(row.choices)
    spellings = (row.short, row.option) if row.short else (row.option,)
    return click.option(*spellings, name, cls=SettingOption, setting=name, **kwargs)


def flag_text(given: str | tuple[str, ...] | None) -> str | None:
    """What an option gave, as its setting's parser reads it: a repeatable option's values
    comma-separated; none given, None."""
    if isinstance(given, tuple):
        return ",".join(given) if given else None
    return given


def settings_from(flags: Mapping[str, str | tuple[str, ...] | None]) -> Settings:
    from ctrain.settings import parse_flag, resolve

    parsed: dict[str, Value] = {
        name: parse_flag(name, flag_text(given)) for name, given in flags.items()
    }
    return resolve(parsed, os.environ, os.getcwd())


class DashDashCommand(click.Command):
    """Everything after ``--`` is the command, whatever it looks like; before it, the options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            split = args.index("--")
            ctx.meta["ctrain.command"] = tuple(args[split + 1 :])
            args = args[:split]
        else:
            ctx.meta["ctrain.command"] = ()
        return super().parse_args(ctx, args)
