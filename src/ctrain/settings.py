"""Every setting in one table, and its one precedence: flag > CTRAIN_* env > config file > default.

Config files are TOML with top-level keys named as the settings: ``./ctrain.toml`` first, then
``$XDG_CONFIG_HOME/ctrain/config.toml`` (``~/.config`` when XDG_CONFIG_HOME is unset).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import NamedTuple

from ctrain.errors import ConfigError
from ctrain.launch.profile import AUTO_RANKS, DEFAULT_PROFILE_DIR, check_ranks, parse_window
from ctrain.names import (
    AUTO,
    BENCH_LAUNCHER_CHOICES,
    COLLECTIVE_CHOICES,
    KERAS_CHOICES,
    MODE_CHOICES,
    PROGRESS_CHOICES,
    RUNTIME_CHOICES,
    TUNE_CHOICES,
)

Value = str | int | bool | tuple[str, ...] | None


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return text

    return parse


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise ValueError("must be a positive integer")
    return int(text)


def _flag(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


def _words(text: str) -> tuple[str, ...]:
    """A list from an environment string: comma-separated, empty items dropped."""
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _text(text: str) -> str:
    return text


def _window(text: str) -> str:
    return str(parse_window(text))


class Setting(NamedTuple):
    name: str
    default: Value
    help: str
    parse: Callable[[str], Value]

    @property
    def env(self) -> str:
        return "CTRAIN_" + self.name.upper()


# What the core reads: launch, containers, images, data.
CORE_SETTINGS: tuple[Setting, ...] = (
    Setting("mode", AUTO, "distributed mode", _choice(*MODE_CHOICES)),
    Setting(
        "collective",
        AUTO,
        "collective implementation for TF modes",
        _choice(*COLLECTIVE_CHOICES),
    ),
    Setting("collective_timeout", 600, "seconds before a stalled collective fails", _positive_int),
    Setting("port_base", 20000, "lowest port ctrain derives worker ports from", _positive_int),
    Setting("runtime", AUTO, "container runtime", _choice(*RUNTIME_CHOICES)),
    Setting("image", "docker://ghcr.io/ctrain/ctrain:0.1.0-gpu", "default image reference", _text),
    Setting("cache_dir", None, "image cache and temporary directory (not under $HOME)", _text),
    Setting("allow_home_cache", False, "accept an image cache under $HOME", _flag),
    Setting("binds", (), "bind paths SRC[:DST[:ro|rw]], comma-separated", _words),
    Setting("nv", False, "give the container the task's NVIDIA GPUs", _flag),
    Setting("overlay", None, "overlay image FILE[:ro] (apptainer, singularity)", _text),
    Setting("env_file", None, "file of NAME=VALUE lines for the container", _text),
    Setting("cwd", None, "working directory in the container (default: where ctrain runs)", _text),
    Setting(
        "launch",
        True,
        "run the command through ctrain launch (apptainer, singularity, docker, podman, pyxis: "
        "the host's, carried into the image; charliecloud: the image's own)",
        _flag,
    ),
    Setting(
        "image_python",
        None,
        "the image's Python that runs the carried ctrain launch (default: the command's own "
        "interpreter, else python3 on the image's PATH)",
        _text,
    ),
    Setting("dry_run", False, "print the command and its environment, run nothing", _flag),
    Setting("show_secrets", False, "print secret-looking values (*KEY*, *TOKEN*, ...)", _flag),
    Setting("min_free_gb", 20, "free space needed before a pull or build, in GiB", _positive_int),
    Setting(
        "build_tmpdir",
        None,
        "temporary space of apptainer pull/build (node-local; none: $TMPDIR, else /tmp)",
        _text,
    ),
    Setting(
        "progress",
        AUTO,
        "progress of pulls, pushes and builds: bar (sizes, rate), lines (one per finished "
        "layer or step), off; auto: bar on a terminal, else lines",
        _choice(*PROGRESS_CHOICES),
    ),
    Setting("keep_proxies", False, "keep http(s)/grpc proxies for the job's processes", _flag),
    Setting("quiet", False, "no banner from rank 0", _flag),
    Setting(
        "keras",
        AUTO,
        "Keras the script runs on: 2 (tf-keras, TF_USE_LEGACY_KERAS=1) or 3; "
        "auto: 3 if the script imports keras itself",
        _choice(*KERAS_CHOICES),
    ),
    Setting(
        "tune",
        AUTO,
        "thread counts and MPI yielding from the allocation, each only where unset "
        "(docs/performance.md); off: none",
        _choice(*TUNE_CHOICES),
    ),
    Setting(
        "skip_mpi_check",
        False,
        "do not check the launcher's MPI/PMIx against the image's before Horovod starts",
        _flag,
    ),
    Setting(
        "profile",
        None,
        "trace training steps FIRST-LAST (e.g. 20-25) with TensorFlow's profiler, and "
        "Horovod's timeline under Horovod; the chief prints where the time went",
        _window,
    ),
    Setting(
        "profile_dir", DEFAULT_PROFILE_DIR, "where --profile puts one directory per run", _text
    ),
    Setting(
        "profile_ranks",
        AUTO_RANKS,
        "ranks that write a trace: auto (the chief and the last rank), all, or a list 0,7",
        check_ranks,
    ),
    Setting("data_dir", None, "datasets (else TFDS_DATA_DIR, ~/tensorflow_datasets)", _text),
    Setting("doctor_network", False, "check the interconnect instead (ctrain doctor)", _flag),
    Setting("check_network", False, "job scripts run ctrain doctor --network first", _flag),
)

# What only ``ctrain bench`` reads (env CTRAIN_BENCH_*).
BENCH_SETTINGS: tuple[Setting, ...] = (
    Setting("bench_workers", "1,2", "worker counts for ctrain bench, comma-separated", _text),
    Setting("bench_model", "ResNet50", "Keras application model ctrain bench trains", _text),
    Setting("bench_batch", 32, "images per worker and step in ctrain bench", _positive_int),
    Setting("bench_image_size", 224, "image side in pixels in ctrain bench", _positive_int),
    Setting("bench_steps", 100, "timed steps per ctrain bench run", _positive_int),
    Setting("bench_iters", 10, "timed iterations the steps are split into", _positive_int),
    Setting("bench_warmup", 10, "untimed first steps of each ctrain bench run", _positive_int),
    Setting("bench_threads", None, "CPU threads per bench worker (none: TF's)", _positive_int),
    Setting(
        "bench_launcher",
        AUTO,
        "what starts bench workers (auto: srun, else mpirun for horovod, else local)",
        _choice(*BENCH_LAUNCHER_CHOICES),
    ),
    Setting("bench_launcher_args", None, "more srun/mpirun options for ctrain bench", _text),
    Setting(
        "bench_script", None, "benchmark script (default: python -m ctrain.bench.synthetic)", _text
    ),
    Setting("bench_timeout", 3600, "seconds one ctrain bench run may take", _positive_int),
    Setting("bench_out", "runs/bench", "directory for ctrain bench's outputs", _text),
    Setting(
        "bench_profile",
        None,
        "trace steps FIRST-LAST (e.g. 20-25) of the largest ctrain bench run only (ctrain "
        "launch --profile), into the bench's output directory",
        _window,
    ),
)

SETTINGS = CORE_SETTINGS + BENCH_SETTINGS  # resolved, shown and checked together
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}


class Resolved(NamedTuple):
    value: Value
    source: str  # "flag", "env CTRAIN_X", "file PATH:LINE" or "default"


class Settings(NamedTuple):
    """Every setting's effective value, typed as its parser returns it (``resolve``); ``sources``
    says where each came from. The fields are the table's names, in its order (a test checks)."""

    mode: str
    collective: str
    collective_timeout: int
    port_base: int
    runtime: str
    image: str
    cache_dir: str | None
    allow_home_cache: bool
    binds: tuple[str, ...]
    nv: bool
    overlay: str | None
    env_file: str | None
    cwd: str | None
    launch: bool
    image_python: str | None
    dry_run: bool
    show_secrets: bool
    min_free_gb: int
    build_tmpdir: str | None
    progress: str
    keep_proxies: bool
    quiet: bool
    keras: str
    tune: str
    skip_mpi_check: bool
    profile: str | None
    profile_dir: str
    profile_ranks: str
    data_dir: str | None
    doctor_network: bool
    check_network: bool
    bench_workers: str
    bench_model: str
    bench_batch: int
    bench_image_size: int
    bench_steps: int
    bench_iters: int
    bench_warmup: int
    bench_threads: int | None
    bench_launcher: str
    bench_launcher_args: str | None
    bench_script: str | None
    bench_timeout: int
    bench_out: str
    bench_profile: str | None
    sources: Mapping[str, str]  # name -> "flag", "env CTRAIN_X", "file PATH:LINE" or "default"


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
    if isinstance(setting.default, bool) or setting.parse is _flag:
        if not isinstance(raw, bool):
            raise ValueError("must be true or false")
        return raw
    if setting.parse is _words:
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
        found = re.search(r"line (\d+)", str(exc))
        line = found.group(1) if found else "1"
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
    values = {name: found.value for name, found in result.items()}
    sources = {name: found.source for name, found in result.items()}
    return Settings(**values, sources=sources)  # type: ignore[arg-type]  # each parser's type


def parse_flag(name: str, text: str | None) -> Value:
    """Validate a flag value with its setting's parser; None means "not given"."""
    if text is None:
        return None
    try:
        return BY_NAME[name].parse(text)
    except ValueError as exc:
        raise ConfigError(
            f"--{name.replace('_', '-')} {text!r}: {exc}", "correct the flag"
        ) from exc
