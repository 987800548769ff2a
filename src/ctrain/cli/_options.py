"""What the command modules share: options for settings, resolving them, ``-- CMD`` parsing.

A setting's option is made from its row in ctrain.settings (its option, choices, metavar and
help): a command names the setting, nothing more. Defining a command imports no library module
(``ctrain --help`` loads every command module): ctrain.settings imports only ctrain's ground
floor (errors, names, profile_window).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ctrain.settings_table import BY_NAME

if TYPE_CHECKING:
    from ctrain.settings_table import Settings

F = TypeVar("F", bound=Callable[..., Any])


class SettingOption(click.Option):
    """The option for a setting; its help is the setting's, naming CTRAIN_* and the default."""

    def __init__(self, *args: Any, setting: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        setting = BY_NAME[self.setting]
        shown = setting.default if setting.default not in (None, ()) else "none"
        self.help = (
            f"{setting.help[:1].upper()}{setting.help[1:]}. [env {setting.env}; default {shown}]"
        )
        return super().get_help_record(ctx)


def setting_option(name: str) -> Callable[[F], F]:
    """The Click option of the setting ``name``, as its row says: a flag for a true/false
    setting (given: "true"), a choice, or a value; unset, None (the setting's precedence then
    decides)."""
    row = BY_NAME[name]
    kwargs: dict[str, Any] = {"default": None, "metavar": row.metavar}
    if row.is_flag:
        kwargs |= {"is_flag": True, "flag_value": "true"}
    elif row.choices:
        kwargs["type"] = click.Choice(row.choices)
    return click.option(row.option, name, cls=SettingOption, setting=name, **kwargs)


def settings_from(flags: dict[str, str | None]) -> Settings:
    from ctrain.settings import parse_flag, resolve
    from ctrain.settings_table import Value

    parsed: dict[str, Value] = {name: parse_flag(name, text) for name, text in flags.items()}
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
