"""Settings precedence (flag > env > ./ctrain.toml > user config > default) and config errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctrain.cli import main
from ctrain.errors import ConfigError
from ctrain.settings import BENCH_SETTINGS, CORE_SETTINGS, SETTINGS, parse_flag, resolve


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
    resolved = resolve({"mode": flag}, environ, cwd)["mode"]
    assert resolved.value == value
    assert resolved.source == source.format(project=project_file, user=user_file)


def test_every_setting_resolves_to_its_default(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    resolved = resolve({}, environ, cwd)
    assert {name: r.value for name, r in resolved.items()} == {s.name: s.default for s in SETTINGS}


def test_bench_settings_have_their_own_table() -> None:
    assert [s.name for s in CORE_SETTINGS if s.name.startswith("bench_")] == []
    assert all(s.name.startswith("bench_") for s in BENCH_SETTINGS)
    assert all(s.env.startswith("CTRAIN_BENCH_") for s in BENCH_SETTINGS)


def test_bench_settings_keep_the_precedence(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    (cwd / "ctrain.toml").write_text('bench_model = "MobileNetV2"\nbench_steps = 7\n')
    environ["CTRAIN_BENCH_STEPS"] = "9"
    resolved = resolve({"bench_batch": 16}, environ, cwd)
    assert (resolved["bench_batch"].value, resolved["bench_batch"].source) == (16, "flag")
    assert (resolved["bench_steps"].value, resolved["bench_steps"].source) == (
        9,
        "env CTRAIN_BENCH_STEPS",
    )
    assert resolved["bench_model"].value == "MobileNetV2"
    assert resolved["bench_iters"].source == "default"


def test_typed_values_from_env_and_file(dirs: tuple[Path, dict[str, str]]) -> None:
    cwd, environ = dirs
    environ["CTRAIN_BINDS"] = "/data:/data:ro, /scratch"
    environ["CTRAIN_QUIET"] = "yes"
    (cwd / "ctrain.toml").write_text("collective_timeout = 120\nkeep_proxies = true\n")
    resolved = resolve({}, environ, cwd)
    assert resolved["binds"].value == ("/data:/data:ro", "/scratch")
    assert resolved["quiet"].value is True
    assert resolved["collective_timeout"].value == 120
    assert resolved["keep_proxies"].value is True


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
