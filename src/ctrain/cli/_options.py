"""What the command modules share: options for settings, resolving them, ``-- CMD`` parsing.

Defining a command imports no library module (``ctrain --help`` loads every command module):
a setting option's help is written from ctrain.settings when it is shown; choices come from
ctrain.names, which imports nothing heavy.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from ctrain.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


class SettingOption(click.Option):
    """The option for a setting; its help is the setting's, naming CTRAIN_* and the default."""

    def __init__(self, *args: Any, setting: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = setting

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from ctrain.settings import BY_NAME

        setting = BY_NAME[self.setting]
        shown = setting.default if setting.default not in (None, ()) else "none"
        self.help = (
            f"{setting.help[:1].upper()}{setting.help[1:]}. [env {setting.env}; default {shown}]"
        )
        return super().get_help_record(ctx)


def setting_option(
    name: str, *decls: str, flag: str | None = None, **kwargs: Any
) -> Callable[[F], F]:
    """A Click option for the setting ``name``: ``--name-with-dashes``, or ``flag``."""
    kwargs.setdefault("default", None)
    flag = flag or "--" + name.replace("_", "-")
    return click.option(flag, *decls, name, cls=SettingOption, setting=name, **kwargs)


def settings_from(flags: dict[str, str | None]) -> Settings:
    from ctrain.settings import Value, parse_flag, resolve

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
