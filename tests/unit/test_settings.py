"""Settings precedence (flag > env > ./ctrain.toml > user config > default) and config errors."""

from __future__ import annotations

import dataclasses
import json
import locale
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ctrain import settings, settings_table
from ctrain.cli import _options, main
from ctrain.errors import ConfigError
from ctrain.settings import config_files, parse_flag, resolve
from ctrain.settings_table import BENCH_SETTINGS, CORE_SETTINGS, SETTINGS
from tests.support.helpers import docs_reference


def one(found: settings_table.Settings, name: str) -> tuple[object, str]:
    """A setting's value and where it came from."""
    return getattr(found, name), found.sources[name]


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    xdg = tmp_path / "xdg"
    (xdg / "ctrain").mkdir(parents=True)
    return project, {"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path)}


def write_user(env: dict[str, str], text: str) -> Path:
    path = Path(env["XDG_CONFIG_HOME"]) / "ctrain" / "config.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("flag", "env", "project", "user", "value", "source"),
    [
        ("horovod", "multiworker", "mirrored", "single", "horovod", "flag"),
        (None, "multiworker", "mirrored", "single", "multiworker", "env CTRAIN_MODE"),
        (None, None, "mirrored", "single", "mirrored", "file {project}:2"),
        (None, None, None, "single", "single", "file {user}:1"),
        (None, None, None, None, "auto", "default"),
    ],
)
def test_precedence(
    dirs: tuple[Path, dict[str, str]],
    flag: str | None,
    env: str | None,
    project: str | None,
    user: str | None,
    value: str,
    source: str,
) -> None:
    cwd, environ = dirs
    if env:
        environ["CTRAIN_MODE"] = env
    project_file = cwd / "ctrain.toml"
    if project:
        project_file.write_text(f'# site defaults\nmode = "{project}"\n')
    user_file = write_user(environ, f'mode = "{user}"\n' if user else "")
    found = one(resolve({"mode": flag}, environ, cwd), "mode")
    assert found == (value, source.format(project=project_file, user=user_file))


def test_every_setting_resolves_to_its_default(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    resolved = resolve({}, environ, cwd)
    assert {s.name: getattr(resolved, s.name) for s in SETTINGS} == {
        s.name: s.default for s in SETTINGS
    }
    assert dataclasses.replace(resolved, sources={}) == settings_table.Settings()  # its defaults


def test_bench_settings_have_their_own_table() -> None:
    assert [s.name for s in CORE_SETTINGS if s.name.startswith("bench_")] == []
    assert all(s.name.startswith("bench_") for s in BENCH_SETTINGS)
    assert all(s.env.startswith("CTRAIN_BENCH_") for s in BENCH_SETTINGS)


def test_bench_settings_keep_the_precedence(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    (cwd / "ctrain.toml").write_text('bench_model = "MobileNetV2"\nbench_steps = 7\n')
    environ["CTRAIN_BENCH_STEPS"] = "9"
    resolved = resolve({"bench_batch": 16}, environ, cwd)
    assert (resolved.bench_batch, resolved.sources["bench_batch"]) == (16, "flag")
    assert (resolved.bench_steps, resolved.sources["bench_steps"]) == (
        9,
        "env CTRAIN_BENCH_STEPS",
    )
    assert resolved.bench_model == "MobileNetV2"
    assert resolved.sources["bench_iters"] == "default"


def test_typed_values_from_env_and_file(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    environ["CTRAIN_BINDS"] = "/data:/data:ro, /scratch"
    environ["CTRAIN_QUIET"] = "yes"
    (cwd / "ctrain.toml").write_text("collective_timeout = 120\nkeep_proxies = true\n")
    resolved = resolve({}, environ, cwd)
    assert resolved.binds == ("/data:/data:ro", "/scratch")
    assert resolved.quiet is True
    assert resolved.collective_timeout == 120
    assert resolved.keep_proxies is True


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ('mode = "auto"\ncollective = \n', 2, "malformed TOML"),
        ("\n\nbogus = 1\n", 3, "unknown setting 'bogus'"),
        ('mode = "fast"\n', 1, "mode must be one of"),
        ("collective_timeout = -3\n", 1, "positive integer"),
        ('quiet = "yes"\n', 1, "true or false"),
        ('binds = "/data"\n', 1, "list of strings"),
    ],
)
def test_malformed_config_names_file_and_line(
    dirs: tuple[Path, dict[str, str]], text: str, line: int, words: str
) -> None:
    cwd, environ = dirs
    path = cwd / "ctrain.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        resolve({}, environ, cwd)
    assert f"{path}:{line}" in caught.value.message
    assert words in caught.value.message


def test_bad_env_value_names_the_variable(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    environ["CTRAIN_PORT_BASE"] = "high"
    with pytest.raises(ConfigError, match="CTRAIN_PORT_BASE='high'"):
        resolve({}, environ, cwd)


def test_bad_flag_value() -> None:
    with pytest.raises(ConfigError, match="--collective-timeout 'soon'"):
        parse_flag("collective_timeout", "soon")


def test_config_show_json_and_text(
    dirs: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd, environ = dirs
    monkeypatch.chdir(cwd)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("CTRAIN_RUNTIME", "docker")
    (cwd / "ctrain.toml").write_text("min_free_gb = 5\n")
    runner = CliRunner()
    shown = runner.invoke(main, ["config", "show", "--json"], catch_exceptions=False)
    assert shown.exit_code == 0
    rows = json.loads(shown.output)
    assert rows["runtime"] == {
        "value": "docker",
        "source": "env CTRAIN_RUNTIME",
        "env": "CTRAIN_RUNTIME",
    }
    assert rows["min_free_gb"]["source"] == f"file {cwd / 'ctrain.toml'}:1"
    assert rows["mode"]["source"] == "default"
    text = runner.invoke(main, ["config", "show"], catch_exceptions=False).output
    assert len(text.splitlines()) == len(SETTINGS)


def test_malformed_config_is_one_line_on_stderr(
    dirs: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd, environ = dirs
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("XDG_CONFIG_HOME", environ["XDG_CONFIG_HOME"])
    (cwd / "ctrain.toml").write_text("mode = [\n")
    result = CliRunner().invoke(main, ["config", "show"])
    assert result.exit_code == ConfigError.exit_code
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctrain: error: ")
    assert "ctrain.toml:1" in lines[0]


# ---------------------------------------------------------------------------------------------
# Each parser, every spelling; the lists of choices are written here, not read from names.py.

KNOWN = (
    "mode, collective, collective_timeout, port_base, runtime, image, cache_dir, "
    "allow_home_cache, binds, nv, overlay, env_file, cwd, launch, image_python, dry_run, "
    "show_secrets, "
    "min_free_gb, build_tmpdir, progress, keep_proxies, quiet, keras, tune, skip_mpi_check, "
    "profile, profile_dir, profile_ranks, data_dir, stop_budget, stall_timeout, "
    "doctor_network, check_network, preflight, preflight_free, fault_retries, remote, "
    "sync_exclude, ssh_persist, "
    "bench_workers, bench_model, bench_batch, bench_image_size, bench_steps, bench_iters, "
    "bench_warmup, bench_threads, bench_launcher, bench_launcher_args, bench_script, "
    "bench_timeout, bench_out, bench_profile"
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", True),
        ("true", True),
        ("True", True),
        ("YES", True),
        (" on ", True),
        ("0", False),
        ("false", False),
        ("FALSE", False),
        ("no", False),
        ("Off", False),
        ("", False),
        ("  ", False),
    ],
)
def test_flag_spellings(text: str, value: bool) -> None:
    assert parse_flag("quiet", text) is value
    assert one(resolve({}, {"CTRAIN_QUIET": text}, "/nonexistent"), "quiet") == (
        value,
        "env CTRAIN_QUIET",
    )


@pytest.mark.parametrize("text", ["2", "y", "n", "enable", "truee", "-1"])
def test_flag_refuses_other_words(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve({}, {"CTRAIN_NV": text}, "/nonexistent")
    assert caught.value.message == f"CTRAIN_NV={text!r}: must be true or false"
    assert caught.value.fix == "correct or unset CTRAIN_NV"


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("600", 600), (" 7 ", 7), ("007", 7)])
def test_positive_int(text: str, value: int) -> None:
    assert parse_flag("collective_timeout", text) == value


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("1800", 1800), (" 30 ", 30)])
def test_non_negative_int(text: str, value: int) -> None:
    assert resolve({}, {"CTRAIN_STALL_TIMEOUT": text}, "/nonexistent").stall_timeout == value


@pytest.mark.parametrize("text", ["-1", "+5", "1.5", "off", ""])
def test_non_negative_int_refused(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve({}, {"CTRAIN_STALL_TIMEOUT": text}, "/nonexistent")
    assert caught.value.message == f"CTRAIN_STALL_TIMEOUT={text!r}: must be 0 or a positive integer"


@pytest.mark.parametrize("text", ["0", "00", "-1", "+5", "1.5", "abc", "", " ", "1e3"])
def test_positive_int_refused(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_flag("port_base", text)
    assert caught.value.message == f"--port-base {text!r}: must be a positive integer"
    assert caught.value.fix == "correct the flag"


@pytest.mark.parametrize(
    ("name", "good", "bad", "message"),
    [
        (
            "mode",
            "horovod",
            "Horovod",
            "must be one of auto, single, mirrored, multiworker, horovod",
        ),
        (
            "runtime",
            "podman",
            "runc",
            "must be one of auto, apptainer, singularity, charliecloud, docker, podman, "
            "pyxis, host",
        ),
        ("keras", "3", "4", "must be one of auto, 2, 3"),
    ],
)
def test_choice(name: str, good: str, bad: str, message: str) -> None:
    assert parse_flag(name, good) == good
    assert parse_flag(name, "auto") == "auto"
    with pytest.raises(ConfigError) as caught:
        parse_flag(name, bad)
    assert caught.value.message == f"--{name} {bad!r}: {message}"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("/a", ("/a",)),
        ("/a:/b:ro, /c ,", ("/a:/b:ro", "/c")),
        (" , ,", ()),
        ("", ()),
    ],
)
def test_words(text: str, value: tuple[str, ...]) -> None:
    assert parse_flag("binds", text) == value


def test_text_is_kept_as_written() -> None:
    assert parse_flag("image", " docker://x ") == " docker://x "
    assert parse_flag("image", None) is None


# ---------------------------------------------------------------------------------------------
# Where config files are, and which one wins


@pytest.mark.parametrize(
    ("environ", "user"),
    [
        ({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/ctrain/config.toml"),
        ({"XDG_CONFIG_HOME": "", "HOME": "/h"}, "/h/.config/ctrain/config.toml"),
        ({"HOME": "/h"}, "/h/.config/ctrain/config.toml"),
        ({}, "~/.config/ctrain/config.toml"),
    ],
)
def test_config_files(environ: dict[str, str], user: str) -> None:
    assert config_files(environ, "/work") == ["/work/ctrain.toml", user]


def test_project_file_wins_per_setting_and_user_file_fills_in(
    dirs: tuple[Path, dict[str, str]],
) -> None:
    cwd, environ = dirs
    (cwd / "ctrain.toml").write_text('mode = "mirrored"\n')
    user = write_user(environ, 'mode = "single"\nquiet = true\n')
    resolved = resolve({}, environ, cwd)
    assert one(resolved, "mode") == ("mirrored", f"file {cwd / 'ctrain.toml'}:1")
    assert one(resolved, "quiet") == (True, f"file {user}:2")


def test_an_empty_flag_list_is_not_given_but_false_is(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    environ.update(CTRAIN_BINDS="/env", CTRAIN_QUIET="1", CTRAIN_MODE="single")
    resolved = resolve({"binds": (), "quiet": False, "mode": None}, environ, cwd)
    assert one(resolved, "binds") == (("/env",), "env CTRAIN_BINDS")
    assert one(resolved, "quiet") == (False, "flag")
    assert one(resolved, "mode") == ("single", "env CTRAIN_MODE")
    assert one(resolve({"binds": ("/f",)}, environ, cwd), "binds") == (("/f",), "flag")


def test_an_empty_env_value_is_a_value(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    (cwd / "ctrain.toml").write_text("dry_run = true\n")
    environ["CTRAIN_DRY_RUN"] = ""
    assert one(resolve({}, environ, cwd), "dry_run") == (False, "env CTRAIN_DRY_RUN")


# ---------------------------------------------------------------------------------------------
# Values from TOML, and what a bad file says (file, line, message and fix in full)


def test_toml_values_by_type(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    (cwd / "ctrain.toml").write_text(
        'binds = ["/a:/b:ro", "/c"]\nimage = 5\nport_base = "21000"\nbench_steps = 9\n'
        'nv = false\nlaunch = true\nkeras = "3"\n'
    )
    found = resolve({}, environ, cwd)
    values = {s.name: getattr(found, s.name) for s in SETTINGS}
    assert values["binds"] == ("/a:/b:ro", "/c")
    assert values["image"] == "5"
    assert values["port_base"] == 21000
    assert values["bench_steps"] == 9
    assert values["nv"] is False
    assert values["launch"] is True
    assert values["keras"] == "3"


@pytest.mark.parametrize(
    ("text", "line", "key", "problem"),
    [
        ("quiet = 1\n", 1, "quiet", "must be true or false"),
        ('launch = "true"\n', 1, "launch", "must be true or false"),
        ("binds = [1]\n", 1, "binds", "must be a list of strings"),
        ('binds = "/a"\n', 1, "binds", "must be a list of strings"),
        ("port_base = true\n", 1, "port_base", "must be a string or an integer"),
        ("image = 1.5\n", 1, "image", "must be a string or an integer"),
        ('mode = ["single"]\n', 1, "mode", "must be a string or an integer"),
        ("port_base = 0\n", 1, "port_base", "must be a positive integer"),
        ("keras = 4\n", 1, "keras", "must be one of auto, 2, 3"),
        (
            'collective_timeout = 5\ncollective = "x"\n',
            2,
            "collective",
            "must be one of auto, nccl, ring",
        ),
        ('# x\n\n  quiet   = "no"\n', 3, "quiet", "must be true or false"),
        ("[mode]\nx = 1\n", 1, "mode", "must be a string or an integer"),
        ('# x\n"quiet" = 1\n', 2, "quiet", "must be true or false"),
        ("# x\n\n 'nv'= 0\n", 3, "nv", "must be true or false"),
        (
            '"collective_timeout" = 5\n"collective" = 1\n',
            2,
            "collective",
            "must be one of auto, nccl, ring",
        ),
    ],
)
def test_bad_value_in_a_config_file(
    dirs: tuple[Path, dict[str, str]], text: str, line: int, key: str, problem: str
) -> None:
    cwd, environ = dirs
    path = cwd / "ctrain.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        resolve({}, environ, cwd)
    assert caught.value.message == f"{path}:{line}: {key} {problem}"
    assert caught.value.fix == f"correct {key} in {path}"


@pytest.mark.parametrize(
    ("text", "line", "message", "fix"),
    [
        ("\n\nbogus = 1\n", 3, "unknown setting 'bogus'", f"use one of: {KNOWN}"),
        (
            'mode = "auto"\nquiet = \n',
            2,
            "malformed TOML (Invalid value (at line 2, column 9))",
            "write settings as key = value",
        ),
        (
            'mode = "auto"\nquiet = [\n',
            1,
            "malformed TOML (Invalid value (at end of document))",
            "write settings as key = value",
        ),
    ],
)
def test_bad_config_file(
    dirs: tuple[Path, dict[str, str]], text: str, line: int, message: str, fix: str
) -> None:
    cwd, environ = dirs
    path = cwd / "ctrain.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        resolve({}, environ, cwd)
    assert caught.value.message == f"{path}:{line}: {message}"
    assert caught.value.fix == fix


def test_an_unreadable_config_file(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    path = cwd / "ctrain.toml"
    path.write_bytes(b'mode = "\xff"\n')
    with pytest.raises(ConfigError) as caught:
        resolve({}, environ, cwd)
    assert caught.value.message.startswith(f"cannot read {path}: 'utf-8' codec can't decode")
    assert caught.value.fix == "fix or remove the file"
    path.unlink()
    path.mkdir()
    with pytest.raises(ConfigError) as caught:
        resolve({}, environ, cwd)
    assert caught.value.message == f"cannot read {path}: [Errno 21] Is a directory: '{path}'"


@pytest.fixture
def ascii_locale() -> Iterator[None]:
    """ASCII as the locale's encoding (the C locale, where Python is not in its UTF-8 mode)."""
    before = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, before)


@pytest.mark.usefixtures("ascii_locale")
def test_a_config_file_is_utf8_whatever_the_locale(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    path = cwd / "ctrain.toml"
    path.write_bytes('cache_dir = "/scratch/jos\u00e9"\n'.encode())
    assert one(resolve({}, environ, cwd), "cache_dir") == ("/scratch/jos\u00e9", f"file {path}:1")


def _is(value: object, annotation: object) -> bool:
    """Whether ``value`` is of the type ``annotation`` (the kinds Settings uses)."""
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        return any(_is(value, arm) for arm in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if typing.get_origin(annotation) is tuple:
        return isinstance(value, tuple) and all(isinstance(item, str) for item in value)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation)  # type: ignore[arg-type]


def test_settings_fields_are_the_table_and_typed_as_its_parsers_return() -> None:
    hints = typing.get_type_hints(settings_table.Settings)
    assert list(hints) == [s.name for s in settings_table.SETTINGS] + ["sources"]
    for setting in settings_table.SETTINGS:
        assert _is(setting.default, hints[setting.name]), setting.name
    examples = {"str": "x", "int": "3", "bool": "yes", "tuple": "a,b"}
    for setting in settings_table.SETTINGS:
        for text in examples.values():
            try:
                parsed = setting.parse(text)
            except ValueError:
                continue
            assert _is(parsed, hints[setting.name]), (setting.name, text, parsed)


def test_resolve_gives_each_setting_its_type_and_source(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path), "CTRAIN_MIN_FREE_GB": "7", "CTRAIN_BINDS": "/a,/b:/c"}
    found = settings.resolve({"nv": True}, environ, tmp_path)
    assert (found.min_free_gb, found.binds, found.nv, found.image) == (
        7,
        ("/a", "/b:/c"),
        True,
        settings_table.BY_NAME["image"].default,
    )
    assert found.sources["min_free_gb"] == "env CTRAIN_MIN_FREE_GB"
    assert (found.sources["nv"], found.sources["image"]) == ("flag", "default")


def test_a_new_row_is_an_option_a_variable_a_typed_field_and_a_reference_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Adding a setting is adding one row, a field of Settings (here in a subclass, the table
    then read from it): its option with --help naming the variable, its typed value through the
    precedence, and its line on the settings page follow, with no other edit."""

    @dataclasses.dataclass(frozen=True)
    class WithOne(settings_table.Settings):
        warp_factor: int = settings_table._row(
            9, "how fast to go", settings_table._positive_int, metavar="N"
        )

    table = settings_table.rows(WithOne)
    assert table[:-1] == settings_table.SETTINGS and table[-1].name == "warp_factor"
    by_name = {s.name: s for s in table}
    for module, values in {
        settings_table: {"BY_NAME": by_name, "CORE_SETTINGS": table[-1:]},
        settings: {"BY_NAME": by_name, "SETTINGS": table, "Settings": WithOne},
        _options: {"BY_NAME": by_name},
    }.items():
        for name, value in values.items():
            monkeypatch.setattr(module, name, value)

    @click.command()
    @_options.setting_option("warp_factor")
    def engage(**flags: str | None) -> None:
        click.echo(repr(_options.settings_from(flags).warp_factor))  # type: ignore[attr-defined]

    runner = CliRunner()
    helped = runner.invoke(engage, ["--help"]).output
    assert (
        "--warp-factor N How fast to go. [env CTRAIN_WARP_FACTOR; setting warp_factor; default 9]"
        in " ".join(helped.split())
    )
    assert runner.invoke(engage, ["--warp-factor", "3"]).output == "3\n"
    assert runner.invoke(engage, [], env={"CTRAIN_WARP_FACTOR": "4"}).output == "4\n"
    refused = runner.invoke(engage, ["--warp-factor", "fast"])
    assert isinstance(refused.exception, ConfigError)
    assert str(refused.exception) == "--warp-factor 'fast': must be a positive integer"
    page = docs_reference().settings_page({"warp_factor": ["--warp-factor"]})
    assert (
        "| `warp_factor` | `CTRAIN_WARP_FACTOR` | `--warp-factor` | `9` | how fast to go |" in page
    )
