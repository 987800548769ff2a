"""What the command modules share: options for settings, resolving them, ``-- CMD`` parsing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ctrain.settings import BY_NAME, Resolved, Value, parse_flag, resolve

F = TypeVar("F", bound=Callable[..., Any])


def setting_option(name: str, *decls: str, **kwargs: Any) -> Callable[[F], F]:
    """A Click option for a setting; its help names the CTRAIN_* variable and the default."""
    setting = BY_NAME[name]
    flag = "--" + name.replace("_", "-")
    shown = setting.default if setting.default not in (None, ()) else "none"
    kwargs.setdefault("default", None)
    kwargs["help"] = (
        f"{setting.help[:1].upper()}{setting.help[1:]}. [env {setting.env}; default {shown}]"
    )
    return click.option(flag, *decls, name, **kwargs)


def settings_from(flags: dict[str, str | None]) -> dict[str, Resolved]:
    parsed: dict[str, Value] = {name: parse_flag(name, text) for name, text in flags.items()}
    return resolve(parsed, os.environ, Path.cwd())


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
