"""Every option that sets a setting is declared from its row (``setting_option``): it carries
the row's name, its spellings are the row's, its help ends with the row's variable, name and
default as a user writes them; an option that shares a setting's name without being it is named
here, with why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ctrain.cli import main
from ctrain.cli._options import SettingOption, setting_option, settings_from
from ctrain.settings_table import BY_NAME, SETTINGS

# Options with a setting's name that are not that setting, each with the reason.
NOT_SETTINGS = {
    # the job's request (default: GPUs > 0), written into the script as ctrain exec --nv
    ("ctrain job render", "nv"),
    ("ctrain job submit", "nv"),
    # lists what `cache clean` would remove: the command's own switch, not CTRAIN_DRY_RUN
    ("ctrain cache clean", "dry_run"),
}


def options() -> Iterator[tuple[str, click.Option]]:
    """Every option of every command under ``ctrain``, with the command's path (each command
    in the context Click gives it: its help option is cached as that context names it)."""

    def walk(
        command: click.Command, path: str, parent: click.Context | None
    ) -> Iterator[tuple[str, click.Option]]:
        ctx = click.Context(
            command, info_name=path.split()[-1], parent=parent, **command.context_settings
        )
        for param in command.get_params(ctx):
            if isinstance(param, click.Option):
                yield path, param
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                child = command.get_command(ctx, name)
                assert child is not None, f"{path} {name}"
                yield from walk(child, f"{path} {name}", ctx)

    return walk(main, "ctrain", None)


def spellings(option: click.Option) -> set[str]:
    return {*option.opts, *option.secondary_opts}


def test_an_option_named_as_a_setting_is_made_from_its_row() -> None:
    by_option = {setting.option: setting.name for setting in SETTINGS}
    for path, option in options():
        named = {option.name} | {by_option.get(flag) for flag in spellings(option)}
        settings = named & set(BY_NAME)
        if (path, option.name) in NOT_SETTINGS:
            assert not isinstance(option, SettingOption), (path, option.name)
            continue
        assert not settings or isinstance(option, SettingOption), (path, option.opts, settings)


def test_only_an_option_made_from_a_row_names_a_variable_or_a_setting() -> None:
    for path, option in options():
        if not isinstance(option, SettingOption):
            assert "CTRAIN_" not in (option.help or ""), (path, option.opts)
            assert "; setting " not in (option.help or ""), (path, option.opts)


def test_a_setting_option_is_its_row_spelled_and_helped_as_the_row_says() -> None:
    seen = set()
    for path, option in options():
        if not isinstance(option, SettingOption):
            continue
        row = BY_NAME[option.setting]
        seen.add(row.name)
        assert option.name == row.name, path
        assert option.opts == [row.short, row.option] if row.short else [row.option], path
        assert option.multiple == row.is_list and option.is_flag == row.is_flag, path
        assert (option.help or "").endswith("]") and (
            f". [env {row.env}; setting {row.name}; default " in (option.help or "")
        ), (path, option.help)
    assert seen == {setting.name for setting in SETTINGS if not setting.flagless}


def test_a_setting_either_has_an_option_or_says_why_not() -> None:
    """A row's ``flagless`` says why no command takes it; the others each have an option."""
    with_option = {option.setting for _, option in options() if isinstance(option, SettingOption)}
    for setting in SETTINGS:
        assert (setting.name in with_option) != bool(setting.flagless), setting.name


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["job", "submit", "--help"], "default runs/,*.out,__pycache__/,.venv/]"),
        (["job", "submit", "--help"], "[env CTRAIN_IMAGE; setting image; default the template's]"),
        (["exec", "--help"], "[env CTRAIN_NV; setting nv; default false]"),
        (["exec", "--help"], "[env CTRAIN_LAUNCH; setting launch; default true]"),
        (["exec", "--help"], "[env CTRAIN_BINDS; setting binds; default none]"),
        (["launch", "--help"], "[env CTRAIN_PORT_BASE; setting port_base; default 20000]"),
    ],
)
def test_help_shows_defaults_as_a_user_writes_them(args: list[str], shown: str) -> None:
    text = CliRunner().invoke(main, args, catch_exceptions=False).output
    assert shown in " ".join(text.split())
    assert "('" not in text and "False" not in text and "True" not in text


@click.command()
@setting_option("launch")
@setting_option("binds")
@setting_option("sync_exclude")
@setting_option("nv")
def record(**flags: str | tuple[str, ...] | None) -> None:
    click.echo(repr(flags))
    settings = settings_from(flags)
    click.echo(repr((settings.launch, settings.binds, settings.sync_exclude, settings.nv)))


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for setting in SETTINGS:
        monkeypatch.delenv(setting.env, raising=False)
    return tmp_path


def test_inverted_repeatable_and_short_options_give_their_settings(here: Path) -> None:
    runner = CliRunner()
    unset = runner.invoke(record, [], catch_exceptions=False).output.splitlines()
    assert unset[0] == repr({"launch": None, "binds": (), "sync_exclude": (), "nv": None})
    assert unset[1] == repr((True, (), BY_NAME["sync_exclude"].default, False))
    args = ["--no-launch", "-B", "/a", "--bind", "/b:/c", "--exclude", "x,y", "--exclude", "z"]
    given = runner.invoke(record, [*args, "--nv"], catch_exceptions=False).output.splitlines()
    assert given[1] == repr((False, ("/a", "/b:/c"), ("x", "y", "z"), True))
