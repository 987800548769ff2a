"""``ctrain bench``: the synthetic benchmark at several worker counts, and the scaling report.

Each count runs the synthetic benchmark (``ctrain.bench.synthetic``, or the user's script)
through the launch path users use (``srun -n N ctrain launch -- python -m
ctrain.bench.synthetic ...``; ``mpirun -np N ...`` for
Horovod where there is no Slurm); every rank writes a JSON report, and the chief's rates give
the table. This module holds the pure part: options, results, the scaling math, the Markdown,
the argv builders and the progress line. ``ctrain.bench.run`` runs them.

With ``--profile STEPS`` the largest worker count's run, and only it, traces those steps
(``ctrain.bench.profile``); here the window is checked against the run's steps.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ctrain.bench.profile import PROFILE_VARIABLE, ProfileRun, markdown_profile
from ctrain.errors import ConfigError, ExternalToolError, LaunchError
from ctrain.names import BENCH_LAUNCHERS, ONE_PROCESS
from ctrain.profile_window import Window, parse_window
from ctrain.settings_table import BENCH_PREFIX, BY_NAME, Settings

THREAD_VARIABLES = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
SYNTHETIC_MODULE = "ctrain.bench.synthetic"  # the benchmark ``ctrain bench`` runs by default


@dataclass(frozen=True)
class BenchOptions:
    """What to measure and how to launch it."""

    workers: tuple[int, ...] = (1, 2)
    mode: str = "auto"
    model: str = "ResNet50"
    batch: int = 32
    image_size: int = 224
    steps: int = 100
    iters: int = 10
    warmup: int = 10
    threads: int = 0
    launcher: str = "auto"
    launcher_args: tuple[str, ...] = ()
    timeout: float = 3600.0
    profile: str | None = None  # steps FIRST-LAST the largest run traces (--profile)

    @classmethod
    def from_settings(cls, settings: Settings) -> BenchOptions:
        """Each field from its bench_ row (``mode`` from mode's), in the form the bench uses."""
        named = [f.name for f in fields(cls) if BENCH_PREFIX + f.name in BY_NAME]
        given = {name: getattr(settings, BENCH_PREFIX + name) for name in named}
        return cls(
            **given
            | {
                "mode": settings.mode,
                "workers": parse_workers(settings.bench_workers),
                "threads": settings.bench_threads or 0,  # unset: TensorFlow's own
                "launcher_args": tuple(shlex.split(settings.bench_launcher_args or "")),
                "timeout": float(settings.bench_timeout),
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


@dataclass(frozen=True)
class RunResult:
    """One worker count: the chief's rates and every rank's memory."""

    workers: int
    mode: str
    per_worker: float
    per_worker_conf: float
    total: float
    total_conf: float
    peak_rss_mb: tuple[float, ...]
    wall_s: float
    first_step_s: float | None = None
    argv: tuple[str, ...] = ()


@dataclass(frozen=True)
class Row:
    """A line of the scaling table."""

    workers: int
    mode: str
    total: float
    total_conf: float
    per_worker: float
    speedup: float
    efficiency: float


@dataclass
class BenchReport:
    options: BenchOptions
    launcher: str
    results: list[RunResult] = field(default_factory=list)
    host: str = ""
    started: str = ""
    command: str = ""
    profile: ProfileRun | None = None

    def rows(self) -> list[Row]:
        return scaling_rows(self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "options": {**asdict(self.options), "workers": list(self.options.workers)},
            "launcher": self.launcher,
            "host": self.host,
            "started": self.started,
            "command": self.command,
            "runs": [asdict(r) for r in self.results],
            "scaling": [asdict(r) for r in self.rows()],
            "profile": None if self.profile is None else asdict(self.profile),
        }


def parse_workers(text: str) -> tuple[int, ...]:
    """ "1,2,4" -> (1, 2, 4): positive, distinct, in increasing order."""
    try:
        counts = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError as exc:
        raise ConfigError(
            f"--workers {text!r} is not a list of numbers", "give counts like 1,2,4"
        ) from exc
    if not counts or min(counts) < 1:
        raise ConfigError(f"--workers {text!r} needs counts of at least 1", "e.g. --workers 1,2,4")
    if len(set(counts)) != len(counts):
        raise ConfigError(f"--workers {text!r} repeats a count", "give each count once")
    return tuple(sorted(counts))


def scaling_rows(results: Sequence[RunResult]) -> list[Row]:
    """Speed-up and scaling efficiency against the smallest worker count measured.

    speed-up(N) = total(N) / total(base); efficiency(N) = speed-up(N) / (N / base), so a
    perfectly linear run has efficiency 1.0 at every N.
    """
    if not results:
        return []
    ordered = sorted(results, key=lambda r: r.workers)
    base = ordered[0]
    rows = []
    for r in ordered:
        speedup = r.total / base.total if base.total > 0 else float("nan")
        ideal = r.workers / base.workers
        rows.append(
            Row(r.workers, r.mode, r.total, r.total_conf, r.per_worker, speedup, speedup / ideal)
        )
    return rows


def mean_conf(rates: Sequence[float]) -> tuple[float, float]:
    """Mean and 1.96 population standard deviations, as Horovod's benchmark reports them."""
    if not rates:
        return float("nan"), float("nan")
    mean = sum(rates) / len(rates)
    std = math.sqrt(sum((x - mean) ** 2 for x in rates) / len(rates))
    return mean, 1.96 * std


def markdown_table(rows: Sequence[Row]) -> str:
    """The scaling table in Markdown."""
    lines = [
        "| workers | mode | images/s (total) | +- 1.96 std | images/s per worker | speed-up "
        "| scaling efficiency |",
        "|--:|:--|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.workers} | {r.mode} | {r.total:.1f} | {r.total_conf:.1f} | "
            f"{r.per_worker:.1f} | {r.speedup:.2f}x | {r.efficiency:.0%} |"
        )
    return "\n".join(lines) + "\n"


def markdown_report(report: BenchReport) -> str:
    """The table with what was measured and the command that measured it."""
    o = report.options
    threads = o.threads or "TensorFlow default"
    head = [
        f"# ctrain bench: {o.model}",
        "",
        *([f"- command: `{report.command}`"] if report.command else []),
        f"- host: {report.host}, started {report.started}",
        f"- mode {o.mode}, launcher {report.launcher}, batch {o.batch} per worker, "
        f"{o.image_size}x{o.image_size} images, {o.warmup} warm-up steps, "
        f"{o.iters} timed iterations of {o.batches_per_iter} steps, threads per worker: "
        f"{threads}",
        "- speed-up and efficiency are against the smallest worker count; images/s are the "
        "chief's mean over the timed iterations (+- 1.96 standard deviations), times the "
        "workers",
        "",
    ]
    text = "\n".join(head) + "\n" + markdown_table(report.rows())
    if report.profile is not None:
        text += "\n" + markdown_profile(report.profile, o.warmup)
    return text


def profile_window(options: BenchOptions) -> Window | None:
    """The steps the largest run traces, None without ``--profile``. A window that ends after
    the run's last step is refused here, before anything runs."""
    if options.profile is None:
        return None
    try:
        window = parse_window(options.profile)
    except ValueError as exc:
        raise ConfigError(f"--profile {options.profile!r}: {exc}", "correct the flag") from exc
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
    found = ITER.match(line)
    return int(found.group(1)) + 2 if found else None


def progress_line(done: int, total: int, label: str, width: int = 24) -> str:
    """``[#########---------]  9/20  label``"""
    total = max(total, 1)
    done = min(max(done, 0), total)
    filled = round(width * done / total)
    return f"[{'#' * filled}{'-' * (width - filled)}] {done:>{len(str(total))}}/{total}  {label}"


def result_from_reports(
    workers: int, reports: Sequence[Mapping[str, Any]], wall_s: float, argv: Sequence[str]
) -> RunResult:
    """One RunResult from the ranks' JSON reports (the chief's rates, everyone's memory)."""
    by_rank = sorted(reports, key=lambda r: int(r["rank"]))
    if len(by_rank) != workers:
        raise LaunchError(
            f"{workers} workers were asked for but {len(by_rank)} reports were written",
            "check the run's log: a rank may have failed or run in another mode",
        )
    chief = by_rank[0]
    mean, conf = mean_conf([float(x) for x in chief["rates"]])
    replicas = int(chief["replicas"])
    first = chief.get("first_step_at")
    started = chief.get("started_at")
    return RunResult(
        workers=workers,
        mode=str(chief["mode"]),
        per_worker=mean,
        per_worker_conf=conf,
        total=replicas * mean,
        total_conf=replicas * conf,
        peak_rss_mb=tuple(float(r["peak_rss_mb"]) for r in by_rank),
        wall_s=wall_s,
        first_step_s=float(first) - float(started) if first and started else None,
        argv=tuple(argv),
    )
