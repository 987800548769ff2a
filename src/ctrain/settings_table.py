"""Every setting in one row: a field of ``Settings``, with its type, default, help, parser and
command-line option (``Setting``). The Click options (cli/_options.py ``setting_option``, the one
way an option that sets a setting is declared), the reference page (scripts/docs-reference.py)
and the options records that launch/ and bench/ read come from the rows; adding a setting is
adding a row. Their precedence (flag, variable, config file, default) is settings.py's.

The ground floor: this module imports nothing of ctrain's but names and profile_window.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

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
from ctrain.profile_window import AUTO_RANKS, DEFAULT_PROFILE_DIR, check_ranks, parse_window

Value = str | int | bool | tuple[str, ...] | None
ROW = "ctrain.setting"  # the key of a field's row in its metadata
BENCH_PREFIX = "bench_"  # the rows ``ctrain bench`` alone reads
# Why a setting has no option (``Setting.flagless``): what reads it, from its variable or a file.
TRAINING_READS = "the training processes read it (`ctrain.distributed`)"
PREFLIGHT_READS = "the job script's `ctrain job preflight` reads it"


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


def _non_negative_int(text: str) -> int:
    if not text.strip().isdigit():
        raise ValueError("must be 0 or a positive integer")
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


def _persist(text: str) -> str:
    """An OpenSSH time: seconds, or a number with s, m, h, d or w (e.g. 30m, 1h30m)."""
    if not re.fullmatch(r"(\d+[smhdwSMHDW]?)+", text.strip()) or not text.strip()[0].isdigit():
        raise ValueError("must be seconds, or a time such as 30m or 1h")
    return text.strip()


def _worker_counts(text: str) -> str:
    """Worker counts as ``ctrain bench`` runs them: "4, 1,2" -> "1,2,4" (positive, distinct, in
    increasing order; ``worker_counts`` gives them as numbers)."""
    parts = [part for part in text.replace(" ", "").split(",") if part]
    if not parts or not all(part.isdigit() for part in parts):
        raise ValueError("is not a list of counts; give counts like 1,2,4")
    counts = sorted(int(part) for part in parts)
    if counts[0] < 1:
        raise ValueError("needs counts of at least 1; e.g. 1,2,4")
    if len(set(counts)) != len(counts):
        raise ValueError("repeats a count; give each count once")
    return ",".join(str(count) for count in counts)


def worker_counts(checked: str) -> tuple[int, ...]:
    """The counts of a value ``_worker_counts`` returned (bench_workers), as numbers."""
    return tuple(int(count) for count in checked.split(","))


def _window(text: str) -> str:
    return str(parse_window(text))


class Setting(NamedTuple):
    """One setting, everything about it: its config key and variable (``name``), default, help,
    parser, and what its command-line option is (``choices`` for a choice, a true/false setting
    a flag, a list setting a repeatable option, ``option_override`` where the option is not
    ``--name-with-dashes`` (for a bench row, without ``bench-``), ``short`` its one-letter
    spelling, ``metavar``), or, for a setting no command takes as an option, why not
    (``flagless``). The Click option (cli/_options.py), the typed field (``Settings``) and the
    reference page come from it.
    """

    name: str
    default: Value
    help: str
    parse: Callable[[str], Value]
    choices: tuple[str, ...] = ()
    option_override: str | None = None
    short: str | None = None
    metavar: str | None = None
    flagless: str | None = None

    @property
    def env(self) -> str:
        return "CTRAIN_" + self.name.upper()

    @property
    def is_flag(self) -> bool:
        """A true/false setting: its option takes no value."""
        return self.parse is _flag

    @property
    def is_list(self) -> bool:
        """A list setting: comma-separated in its variable, a TOML list in a config file."""
        return self.parse is _words

    @property
    def inverted(self) -> bool:
        """A true/false setting that is true by default: its flag sets it false."""
        return self.is_flag and self.default is True

    @property
    def option(self) -> str:
        """Its command-line option: ``--name-with-dashes``, without ``bench-`` for a bench row
        (``ctrain bench --workers``), unless ``option_override`` says another; ``--no-...`` for
        an inverted flag (``--no-launch``)."""
        long = self.option_override or "--" + self.name.removeprefix(BENCH_PREFIX).replace("_", "-")
        return "--no-" + long.removeprefix("--") if self.inverted else long


def _row(
    default: Value,
    help: str,
    parse: Callable[[str], Value],
    *,
    option_override: str | None = None,
    short: str | None = None,
    metavar: str | None = None,
    flagless: str | None = None,
) -> Any:
    """A field of ``Settings``: its default, and its row (named by the field)."""
    row = Setting("", default, help, parse, (), option_override, short, metavar, flagless)
    return dataclasses.field(default=default, metadata={ROW: row})


def _one_of(default: str, help: str, choices: tuple[str, ...]) -> Any:
    """A field whose value is one of ``choices``."""
    row = Setting("", default, help, _choice(*choices), choices=choices)
    return dataclasses.field(default=default, metadata={ROW: row})


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every setting's effective value, typed as its parser returns it (settings.resolve), one
    field per row; ``sources`` says where each came from."""

    # What the core reads: launch, containers, images and data.
    mode: str = _one_of(AUTO, "distributed mode", MODE_CHOICES)
    collective: str = _one_of(AUTO, "collective implementation for TF modes", COLLECTIVE_CHOICES)
    collective_timeout: int = _row(600, "seconds before a stalled collective fails", _positive_int)
    port_base: int = _row(20000, "lowest port ctrain derives worker ports from", _positive_int)
    runtime: str = _one_of(AUTO, "container runtime", RUNTIME_CHOICES)
    image: str = _row("docker://ghcr.io/ctrain/ctrain:0.1.0-gpu", "default image reference", _text)
    cache_dir: str | None = _row(
        None, "image cache and temporary directory (not under $HOME)", _text
    )
    allow_home_cache: bool = _row(False, "accept an image cache under $HOME", _flag)
    binds: tuple[str, ...] = _row(
        (),
        "bind paths SRC[:DST[:ro|rw]], comma-separated",
        _words,
        option_override="--bind",
        short="-B",
        metavar="SRC[:DST[:ro|rw]]",
    )
    nv: bool = _row(False, "give the container the task's NVIDIA GPUs", _flag)
    overlay: str | None = _row(None, "overlay image FILE[:ro] (apptainer, singularity)", _text)
    env_file: str | None = _row(None, "file of NAME=VALUE lines for the container", _text)
    cwd: str | None = _row(
        None, "working directory in the container (default: where ctrain runs)", _text
    )
    launch: bool = _row(
        True,
        "run the command through ctrain launch (apptainer, singularity, docker, podman, pyxis: "
        "the host's, carried into the image; charliecloud: the image's own)",
        _flag,
    )
    image_python: str | None = _row(
        None,
        "the image's Python that runs the carried ctrain launch (default: the command's own "
        "interpreter when it is a Python, else python3, then python, on the image's PATH)",
        _text,
        metavar="PATH",
    )
    dry_run: bool = _row(False, "print the command and its environment, run nothing", _flag)
    show_secrets: bool = _row(False, "print secret-looking values (*KEY*, *TOKEN*, ...)", _flag)
    min_free_gb: int = _row(20, "free space needed before a pull or build, in GiB", _positive_int)
    build_tmpdir: str | None = _row(
        None,
        "temporary space of apptainer pull/build (node-local; none: $TMPDIR, else /tmp)",
        _text,
        option_override="--tmpdir",
        metavar="DIR",
    )
    progress: str = _one_of(
        AUTO,
        "progress of pulls, pushes and builds: bar (sizes, rate), lines (one per finished "
        "layer or step), off; auto: bar on a terminal, else lines",
        PROGRESS_CHOICES,
    )
    keep_proxies: bool = _row(False, "keep http(s)/grpc proxies for the job's processes", _flag)
    quiet: bool = _row(False, "no banner from rank 0", _flag)
    keras: str = _one_of(
        AUTO,
        "Keras the script runs on: 2 (tf-keras, TF_USE_LEGACY_KERAS=1) or 3; "
        "auto: 3 if the script imports keras itself",
        KERAS_CHOICES,
    )
    tune: str = _one_of(
        AUTO,
        "thread counts, MPI yielding and, without a GPU, glibc's malloc from the allocation, "
        "each only where unset (docs/performance.md); off: none",
        TUNE_CHOICES,
    )
    skip_mpi_check: bool = _row(
        False,
        "do not check the launcher's MPI/PMIx against the image's before Horovod starts",
        _flag,
    )
    profile: str | None = _row(
        None,
        "trace training steps FIRST-LAST (e.g. 20-25) with TensorFlow's profiler, and "
        "Horovod's timeline under Horovod; the chief prints where the time went",
        _window,
        metavar="STEPS",
    )
    profile_dir: str = _row(
        DEFAULT_PROFILE_DIR, "where --profile puts one directory per run", _text, metavar="DIR"
    )
    profile_ranks: str = _row(
        AUTO_RANKS,
        "ranks that write a trace: auto (the chief and the last rank), all, or a list 0,7",
        check_ranks,
        metavar="RANKS",
    )
    data_dir: str | None = _row(None, "datasets (else TFDS_DATA_DIR, ~/tensorflow_datasets)", _text)
    stop_budget: int = _row(
        25,
        "seconds from SIGTERM within which a training checkpoints and exits, or else ends "
        "without a checkpoint (below Slurm's KillWait, 30 s by default, or GraceTime)",
        _positive_int,
        flagless=TRAINING_READS,
    )
    stall_timeout: int = _row(
        1800,
        "seconds without a training step after which a rank in fit ends itself as stuck (exit "
        "124); room for the first step's compilation, validation and checkpoints; 0: off",
        _non_negative_int,
        flagless=TRAINING_READS,
    )
    doctor_network: bool = _row(
        False, "check the interconnect instead (ctrain doctor)", _flag, option_override="--network"
    )
    check_network: bool = _row(False, "job scripts run ctrain doctor --network first", _flag)
    preflight: bool = _row(
        True,
        "job scripts check every node before training and after a failed step, and requeue "
        "the job without a node that fails (ctrain job preflight)",
        _flag,
        flagless=PREFLIGHT_READS,
    )
    preflight_free: int = _row(
        1,
        "GiB the preflight asks to be free in the job's directory and each node's /tmp",
        _positive_int,
        metavar="GIB",
        flagless=PREFLIGHT_READS,
    )
    fault_retries: int = _row(
        3,
        "times a job script requeues its job after a fault (a node failing its check, a rank "
        "killed or stalled); the time limit's and preemption's requeues are not counted",
        _non_negative_int,
        metavar="N",
        flagless=PREFLIGHT_READS,
    )

    remote: str | None = _row(
        None,
        "cluster the job command runs on, over one SSH connection (ctrain remote add); none: here",
        _text,
        option_override="--on",
        metavar="NAME",
    )
    sync_exclude: tuple[str, ...] = _row(
        ("runs/", "*.out", "__pycache__/", ".venv/"),
        "what job submit --on does not send (rsync patterns), besides .git/ and what "
        ".gitignore files name",
        _words,
        option_override="--exclude",
        metavar="PATTERN,...",
    )
    ssh_persist: str = _row(
        "30m",
        "how long the SSH connection to a remote stays open after its last command (ssh's "
        "ControlPersist: seconds, or e.g. 30m)",
        _persist,
        metavar="TIME",
        flagless="every connection to a remote (`--on`) reads it, whichever command opens it",
    )

    # What only ``ctrain bench`` reads (BENCH_PREFIX; env CTRAIN_BENCH_*).
    bench_workers: str = _row(
        "1,2", "worker counts for ctrain bench, comma-separated", _worker_counts, metavar="N,N,..."
    )
    bench_model: str = _row(
        "ResNet50", "Keras application model ctrain bench trains", _text, metavar="NAME"
    )
    bench_batch: int = _row(
        32, "images per worker and step in ctrain bench", _positive_int, metavar="N"
    )
    bench_image_size: int = _row(
        224, "image side in pixels in ctrain bench", _positive_int, metavar="PX"
    )
    bench_steps: int = _row(100, "timed steps per ctrain bench run", _positive_int, metavar="N")
    bench_iters: int = _row(
        10, "timed iterations the steps are split into", _positive_int, metavar="N"
    )
    bench_warmup: int = _row(
        10, "untimed first steps of each ctrain bench run", _positive_int, metavar="N"
    )
    bench_threads: int | None = _row(
        None, "CPU threads per bench worker (none: TF's)", _positive_int, metavar="N"
    )
    bench_launcher: str = _one_of(
        AUTO,
        "what starts bench workers (auto: srun, else mpirun for horovod, else local)",
        BENCH_LAUNCHER_CHOICES,
    )
    bench_launcher_args: str | None = _row(
        None, "more srun/mpirun options for ctrain bench", _text, metavar="'ARGS'"
    )
    bench_script: str | None = _row(
        None, "benchmark script (default: python -m ctrain.bench.synthetic)", _text, metavar="PATH"
    )
    bench_timeout: int = _row(
        3600, "seconds one ctrain bench run may take", _positive_int, metavar="S"
    )
    bench_out: str = _row(
        "runs/bench", "directory for ctrain bench's outputs", _text, metavar="DIR"
    )
    bench_profile: str | None = _row(
        None,
        "trace steps FIRST-LAST (e.g. 20-25) of the largest ctrain bench run only (ctrain "
        "launch --profile), into the bench's output directory",
        _window,
        metavar="STEPS",
    )
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict)  # name -> "flag", ...


def rows(record: type[Settings] = Settings) -> tuple[Setting, ...]:
    """The rows of ``record``'s fields, each named by its field, in their order."""
    return tuple(
        field.metadata[ROW]._replace(name=field.name)
        for field in dataclasses.fields(record)
        if ROW in field.metadata
    )


DEFAULT_SETTINGS = Settings()  # every setting's default, typed (the options records' defaults)
SETTINGS = rows()  # resolved, shown and checked together
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
CORE_SETTINGS = tuple(s for s in SETTINGS if not s.name.startswith(BENCH_PREFIX))
BENCH_SETTINGS = tuple(s for s in SETTINGS if s.name.startswith(BENCH_PREFIX))
