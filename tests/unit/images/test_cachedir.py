from __future__ import annotations

import itertools
import os
import stat
from pathlib import Path

import pytest

from ctrain.errors import ConfigError
from ctrain.images.cachedir import (
    NO_CACHE_FIX,
    CacheChoice,
    apptainer_env,
    ensure_dirs,
    is_under,
    resolve_cache_dir,
)
from ctrain.settings import Resolved, resolve

HOME = "/home/u"
EXISTING = {Path(p) for p in ("/app-out", "/home/u/app", "/s", "/scratch/u")}
NO_CONFIG = Path("/nonexistent-ctrain-test-cwd")  # no ./ctrain.toml there (nor in /home/u)


def exists(path: Path) -> bool:
    return path in EXISTING


def settings(
    environ: dict[str, str],
    flag: str | None = None,
    allow_home: bool = False,
    cwd: Path = NO_CONFIG,
) -> dict[str, Resolved]:
    """The settings as the CLI resolves them: ``flag`` as --cache-dir, ``allow_home`` as
    --allow-home-cache, the config files from ``cwd`` and ``environ``."""
    flags = {"cache_dir": flag, "allow_home_cache": True if allow_home else None}
    return resolve(flags, environ, cwd)


def choose(
    environ: dict[str, str], flag: str | None = None, allow_home: bool = False
) -> CacheChoice:
    return resolve_cache_dir(settings(environ, flag, allow_home), environ, exists)


def expected(
    flag: str | None,
    env: str | None,
    app: str | None,
    scratch: str | None,
    user: str | None,
    allow_home: bool,
) -> tuple[str, str] | None:
    """The precedence, spelled out: (path, source), or None for "refused"."""
    if flag:
        return flag, "flag"
    if env:
        return env, "env CTRAIN_CACHE_DIR"
    if app == "/app-out":
        return app, "env APPTAINER_CACHEDIR"
    if scratch == "/s":
        return "/s/ctrain", "scratch $SCRATCH"
    if user:
        return f"/scratch/{user}/ctrain", "scratch /scratch/$USER"
    if allow_home:
        return f"{HOME}/.apptainer/cache", "$HOME default"
    return None


TABLE = list(
    itertools.product(
        [None, "/f"],
        [None, "/c"],
        [None, "/app-out", "/app-missing", "/home/u/app"],
        [None, "/s", "/s-missing"],
        [None, "u"],
        [False, True],
    )
)


@pytest.mark.parametrize(("flag", "env", "app", "scratch", "user", "allow_home"), TABLE)
def test_precedence_truth_table(
    flag: str | None,
    env: str | None,
    app: str | None,
    scratch: str | None,
    user: str | None,
    allow_home: bool,
) -> None:
    environ = {"HOME": HOME}
    for name, value in (
        ("CTRAIN_CACHE_DIR", env),
        ("APPTAINER_CACHEDIR", app),
        ("SCRATCH", scratch),
        ("USER", user),
    ):
        if value is not None:
            environ[name] = value
    want = expected(flag, env, app, scratch, user, allow_home)
    if want is None:
        with pytest.raises(ConfigError):
            choose(environ, flag, allow_home)
        return
    got = choose(environ, flag, allow_home)
    assert (str(got.path), got.source) == want
    assert got.under_home == want[0].startswith(HOME + "/")


@pytest.mark.parametrize(
    ("environ", "path", "source"),
    [
        ({"SINGULARITY_CACHEDIR": "/app-out"}, "/app-out", "env SINGULARITY_CACHEDIR"),
        (
            {"APPTAINER_CACHEDIR": "/home/u/app", "SINGULARITY_CACHEDIR": "/app-out"},
            "/app-out",
            "env SINGULARITY_CACHEDIR",
        ),
        (
            {"APPTAINER_CACHEDIR": "/app-out", "SINGULARITY_CACHEDIR": "/s"},
            "/app-out",
            "env APPTAINER_CACHEDIR",
        ),
        ({"WORK": "/s"}, "/s/ctrain", "scratch $WORK"),
        ({"SCRATCH": "/s-missing", "WORK": "/s", "USER": "u"}, "/s/ctrain", "scratch $WORK"),
        ({"SCRATCH": "/home/u/app", "USER": "u"}, "/scratch/u/ctrain", "scratch /scratch/$USER"),
        ({"LOGNAME": "u"}, "/scratch/u/ctrain", "scratch /scratch/$USER"),
        ({"CTRAIN_CACHE_DIR": "  ", "WORK": "/s"}, "/s/ctrain", "scratch $WORK"),
    ],
)
def test_runtime_and_scratch_order(environ: dict[str, str], path: str, source: str) -> None:
    got = choose({"HOME": HOME, **environ})
    assert str(got.path) == path
    assert got.source == source
    assert not got.under_home


def test_explicit_choices_under_home_are_kept_and_flagged() -> None:
    got = choose({"HOME": HOME}, "/home/u/big")
    assert got == CacheChoice(Path("/home/u/big"), "flag", True)
    got = choose({"HOME": HOME, "CTRAIN_CACHE_DIR": HOME})
    assert got.under_home


def test_config_files_take_their_place_and_are_named(tmp_path: Path) -> None:
    """flag > CTRAIN_CACHE_DIR > ./ctrain.toml > user config > the site rules, each reported
    as its true source (a config file is never called "flag")."""
    xdg = tmp_path / "xdg"
    (xdg / "ctrain").mkdir(parents=True)
    (xdg / "ctrain" / "config.toml").write_text('cache_dir = "/user"\n')
    environ = {"HOME": HOME, "XDG_CONFIG_HOME": str(xdg), "SCRATCH": "/s"}

    def got(environ: dict[str, str], flag: str | None = None) -> tuple[str, str]:
        choice = resolve_cache_dir(settings(environ, flag, cwd=tmp_path), environ, exists)
        return str(choice.path), choice.source

    user = xdg / "ctrain" / "config.toml"
    assert got(environ) == ("/user", f"file {user}:1")
    (tmp_path / "ctrain.toml").write_text('# site\ncache_dir = "/project"\n')
    assert got(environ) == ("/project", f"file {tmp_path / 'ctrain.toml'}:2")
    assert got({**environ, "CTRAIN_CACHE_DIR": "/env"}) == ("/env", "env CTRAIN_CACHE_DIR")
    assert got({**environ, "CTRAIN_CACHE_DIR": "/env"}, "/f") == ("/f", "flag")
    (tmp_path / "ctrain.toml").write_text("allow_home_cache = true\n")
    user.unlink()
    assert got({"HOME": HOME}) == (f"{HOME}/.apptainer/cache", "$HOME default")


def test_a_caller_storing_only_records_accepts_home() -> None:
    environ = {"HOME": HOME}
    with pytest.raises(ConfigError, match="needs --allow-home-cache"):
        resolve_cache_dir(settings(environ), environ, exists)
    got = resolve_cache_dir(settings(environ), environ, exists, accept_home=True)
    assert got == CacheChoice(Path(HOME) / ".apptainer" / "cache", "$HOME default", True)


def test_error_lists_every_choice_tried() -> None:
    environ = {"HOME": HOME, "APPTAINER_CACHEDIR": "/home/u/app", "SCRATCH": "/s-missing"}
    with pytest.raises(ConfigError) as raised:
        choose(environ)
    message = raised.value.message
    for part in (
        "APPTAINER_CACHEDIR=/home/u/app (under $HOME)",
        "/s-missing/ctrain (/s-missing does not exist)",
        "$WORK/ctrain (WORK unset)",
        "/scratch/$USER/ctrain (USER unset)",
        "$HOME/.apptainer/cache (needs --allow-home-cache)",
    ):
        assert part in message
    assert raised.value.fix == NO_CACHE_FIX
    assert "CTRAIN_CACHE_DIR" in raised.value.line()
    assert "--allow-home-cache" in raised.value.line()


def test_allow_home_without_home_is_refused() -> None:
    with pytest.raises(ConfigError, match="HOME unset"):
        choose({}, allow_home=True)


def test_home_detection(tmp_path: Path) -> None:
    home = tmp_path / "home"
    outside = tmp_path / "scratch"
    home.mkdir()
    outside.mkdir()
    (home / "scratch").symlink_to(outside)
    assert is_under(home, str(home))
    assert is_under(home / "a" / "b", str(home))
    assert not is_under(home / "scratch" / "ctrain", str(home))  # symlink: judged by real path
    assert is_under(outside / ".." / "home" / "x", str(home))
    assert not is_under(tmp_path / "homework", str(home))  # a prefix of the name is not enough
    assert not is_under(home, None)
    assert not is_under(home, "")
    assert not is_under(home, "/")  # HOME=/ (service accounts) puts nothing under $HOME


def test_apptainer_env() -> None:
    choice = CacheChoice(Path("/s/ctrain"), "flag", False)
    assert apptainer_env(choice) == {
        "APPTAINER_CACHEDIR": "/s/ctrain",
        "SINGULARITY_CACHEDIR": "/s/ctrain",
    }


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ensure_dirs_creates_0700(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        choice = CacheChoice(tmp_path / "we'ird: dir\nx" / "cache", "flag", False)
        ensure_dirs(choice)
        ensure_dirs(choice)  # idempotent
    finally:
        os.umask(old)
    assert _mode(choice.path) == 0o700


def test_ensure_dirs_keeps_an_existing_directory_mode(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    ensure_dirs(CacheChoice(shared, "flag", False))
    assert _mode(shared) == 0o755


def test_ensure_dirs_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "cache").write_text("")
    with pytest.raises(ConfigError, match="cache"):
        ensure_dirs(CacheChoice(tmp_path / "cache", "flag", False))
