"""``ctrain bench``: the synthetic benchmark at several worker counts, and the scaling report.

Each count runs the synthetic benchmark (``ctrain.bench.synthetic``, or the user's script)
through the launch path users use (``srun -n N ctrain launch -- python -m
ctrain.bench.synthetic ...``; ``mpirun -np N ...`` for
Horovod where there is no Slurm); every rank writes a JSON report, and the chief's rates give
the table. This module holds the pure part: the options, the argv builders and the progress
line (the results, the scaling math and the Markdown are bench/report.py's).
``ctrain.bench.run`` runs them.

With ``--profile STEPS`` the largest worker count's run, and only it, traces those steps
(``ctrain.bench.profile``); here the window is checked against the run's steps.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

from ctrain.bench.profile import PROFILE_VARIABLE
from ctrain.errors import ConfigError, ExternalToolError
from ctrain.names import BENCH_LAUNCHERS, ONE_PROCESS
from ctrain.profile_window import StepWindow, window_of
from ctrain.settings_table import BENCH_PREFIX, BY_NAME, DEFAULT_SETTINGS, Settings, worker_counts

THREAD_VARIABLES = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
SYNTHETIC_MODULE = "ctrain.bench.synthetic"  # the benchmark ``ctrain bench`` runs by default


def _launcher_args(text: str | None) -> tuple[str, ...]:
    return tuple(shlex.split(text or ""))


@dataclass(frozen=True)
class BenchOptions:
    """What to measure and how to launch it; each default is its setting's (settings_table.py),
    in the form the bench uses."""

    workers: tuple[int, ...] = worker_counts(DEFAULT_SETTINGS.bench_workers)
    mode: str = DEFAULT_SETTINGS.mode
    model: str = DEFAULT_SETTINGS.bench_model
    batch: int = DEFAULT_SETTINGS.bench_batch
    image_size: int = DEFAULT_SETTINGS.bench_image_size
    steps: int = DEFAULT_SETTINGS.bench_steps
    iters: int = DEFAULT_SETTINGS.bench_iters
    warmup: int = DEFAULT_SETTINGS.bench_warmup
    threads: int = DEFAULT_SETTINGS.bench_threads or 0  # 0: TensorFlow's own
    launcher: str = DEFAULT_SETTINGS.bench_launcher
    launcher_args: tuple[str, ...] = _launcher_args(DEFAULT_SETTINGS.bench_launcher_args)
    timeout: float = float(DEFAULT_SETTINGS.bench_timeout)
    profile: StepWindow | None = window_of(DEFAULT_SETTINGS.bench_profile)  # the largest run's

    @classmethod
    def from_settings(cls, settings: Settings) -> BenchOptions:
        """Each field from its bench_ row (``mode`` from mode's), in the form the bench uses."""
        named = [f.name for f in fields(cls) if BENCH_PREFIX + f.name in BY_NAME]
        given = {name: getattr(settings, BENCH_PREFIX + name) for name in named}
        return cls(
            **given
            | {
                "mode": settings.mode,
                "workers": worker_counts(settings.bench_workers),
                "threads": settings.bench_threads or 0,  # unset: TensorFlow's own
                "launcher_args": _launcher_args(settings.bench_launcher_args),
                "timeout": float(settings.bench_timeout),
                "profile": window_of(settings.bench_profile),
            }
        )

    @property
    def batches_per_iter(self) -> int:
        return max(1, math.ceil(self.steps / self.iters))

    @property
    def timed_steps(self) -> int:
        """The steps of the timed iterations (``steps`` rounded up to whole iterations)."""
        return self.batches_per_iter * self.iters

    @property
    def run_steps(self) -> int:
        """Training steps of one run: the warm-up, then the timed ones."""
        return self.warmup + self.timed_steps


def profile_window(options: BenchOptions) -> StepWindow | None:
    """The steps the largest run traces, None without ``--profile``. A window that ends after
    the run's last step is refused here, before anything runs."""
    window = options.profile
    if window is None:
        return None
    total = options.run_steps
    if window.last > total:
        first = min(max(2, options.warmup + 1), total)
        last = min(total, first + 4)
        raise ConfigError(
            f"--profile {window} ends after the {max(options.workers)}-worker run's last "
            f"step: it trains {total} steps ({options.warmup} warm-up + "
            f"{options.timed_steps} timed)",
            f"trace steps 2-{total} at most, e.g. --profile {first}-{last}, or raise --steps",
        )
    return window


def profiled_workers(options: BenchOptions) -> int | None:
    """The worker count whose run traces: the largest, and only with ``--profile``."""
    return max(options.workers) if options.profile is not None else None


def child_environ(environ: Mapping[str, str], threads: int) -> dict[str, str]:
    """The environment for the launched ranks: ``threads`` TensorFlow/OpenMP threads each
    when given (0 leaves the choice to TensorFlow and ctrain launch), and no CTRAIN_PROFILE:
    bench's own ``--profile`` picks the one run that traces."""
    env = {key: value for key, value in environ.items() if key != PROFILE_VARIABLE}
    if threads > 0:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    return env


def choose_launcher(
    requested: str, mode: str, workers: Sequence[int], have_srun: bool, have_mpirun: bool
) -> str:
    """Which launcher starts the ranks: srun where Slurm is, mpirun for Horovod without it,
    ``local`` (ctrain launch alone) for one process."""
    many = max(workers) > 1
    if mode in ONE_PROCESS and many:
        raise ConfigError(
            f"--mode {mode} runs one process, but --workers asks for {max(workers)}",
            "use --mode multiworker, horovod or auto, or --workers 1",
        )
    if requested != "auto":
        if requested == "local" and many:
            raise ConfigError(
                "--launcher local starts one process", "use srun or mpirun for several workers"
            )
        if requested == "mpirun" and mode == "multiworker" and many:
            raise ConfigError(
                "multiworker ranks come from Slurm, not mpirun",
                "use --launcher srun, or --mode horovod with mpirun",
            )
        available = {"srun": have_srun, "mpirun": have_mpirun, "local": True}[requested]
        if not available:
            raise ExternalToolError(f"{requested} not found on PATH", "install it or pick another")
        return requested
    if have_srun:
        return "srun"
    if have_mpirun and mode in ("horovod", "auto") and many:
        return "mpirun"
    if not many:
        return "local"
    raise ExternalToolError(
        "no srun (Slurm) and no mpirun to start several workers",
        "run on a Slurm cluster, install OpenMPI for --mode horovod, or use --workers 1",
    )


def benchmark_command(
    python: str, script: str | None, options: BenchOptions, report_dir: str
) -> list[str]:
    """The training command every rank runs: the user's ``script``, else ctrain's own
    benchmark (``python -m ctrain.bench.synthetic``)."""
    program = [script] if script is not None else ["-m", SYNTHETIC_MODULE]
    return [
        python,
        *program,
        "--model",
        options.model,
        "--batch-size",
        str(options.batch),
        "--image-size",
        str(options.image_size),
        "--num-warmup-batches",
        str(options.warmup),
        "--num-batches-per-iter",
        str(options.batches_per_iter),
        "--num-iters",
        str(options.iters),
        "--threads",
        str(options.threads),
        "--report",
        report_dir,
    ]


def launch_argv(
    launcher: str,
    mode: str,
    workers: int,
    ctrain: str,
    command: Sequence[str],
    launcher_args: Sequence[str] = (),
    as_root: bool = False,
    forward: Sequence[str] = (),
    launch_options: Sequence[str] = (),
) -> list[str]:
    """``srun``/``mpirun``/nothing, then ``ctrain launch [--mode M] [launch_options] --
    command``.

    ``forward`` names variables mpirun must pass to remote ranks (srun passes all).
    """
    mode_flags = ["--mode", mode] if mode != "auto" else []
    inner = [ctrain, "launch", *mode_flags, *launch_options, "--", *command]
    if launcher == "srun":
        mpi = ["--mpi=pmix"] if mode == "horovod" else []
        return ["srun", "-n", str(workers), "--kill-on-bad-exit=1", *mpi, *launcher_args, *inner]
    if launcher == "mpirun":
        root = ["--allow-run-as-root"] if as_root else []
        exports = [arg for name in forward for arg in ("-x", name)]
        return ["mpirun", "-np", str(workers), *root, "--bind-to", "none", *exports,
                *launcher_args, *inner]  # fmt: skip
    if launcher == "local":
        return inner
    raise ConfigError(f"unknown launcher {launcher!r}", f"use one of {', '.join(BENCH_LAUNCHERS)}")


ITER = re.compile(r"^Iter #(\d+):")


def progress_units(line: str) -> int | None:
    """How many of a run's units (warm-up, then each timed iteration) a chief's output line
    says are done, or None when the line says nothing about progress."""
    if line.startswith("Running benchmark..."):
        return 1
    iteration = ITER.match(line)
    return int(iteration.group(1)) + 2 if iteration else None


def progress_line(done: int, total: int, label: str, width: int = 24) -> str:
    """``[#########---------]  9/20  label``"""
    total = max(total, 1)
    done = min(max(done, 0), total)
    filled = round(width * done / total)
    return f"[{'#' * filled}{'-' * (width - filled)}] {done:>{len(str(total))}}/{total}  {label}"
