"""``ctrain bench``'s side effects: run each worker count, show progress, write the outputs.

Processes start through ``ctrain.util.proc.stream``; every output file is written under a
temporary name and renamed, so an interrupted bench leaves the previous complete files. With
``--profile`` the largest run's trace goes to OUT/profile/RUN (launch/profile.py's layout).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from ctrain.bench.core import (
    THREAD_VARIABLES,
    BenchOptions,
    benchmark_command,
    child_environ,
    choose_launcher,
    launch_argv,
    profile_window,
    profiled_workers,
    progress_line,
    progress_units,
)
from ctrain.bench.profile import PROFILE_DIR, ProfileRun, new_profile_run, profile_flags
from ctrain.bench.report import BenchReport, Row, markdown_report, result_from_reports
from ctrain.errors import ExternalToolError
from ctrain.profile_window import StepWindow
from ctrain.util import fs, proc


class Progress:
    """A progress bar: redrawn in place on a terminal, one line per change elsewhere."""

    def __init__(self, total: int, out: TextIO) -> None:
        self.total, self.out = total, out
        self.done = self.base = 0
        self.tty = out.isatty()
        self.label = self.last = ""

    def start_run(self, label: str) -> None:
        self.label = label
        self.draw()

    def advance_to(self, run_units: int, detail: str) -> None:
        if self.base + run_units > self.done:
            self.done = self.base + run_units
            self.draw(detail)

    def finish_run(self, units: int, detail: str) -> None:
        self.base += units
        self.done = self.base
        self.draw(detail, final=True)

    def draw(self, detail: str = "", final: bool = False) -> None:
        text = progress_line(self.done, self.total, f"{self.label} {detail}".strip())
        if self.tty:
            self.out.write("\r" + text.ljust(len(self.last)) + ("\n" if final else ""))
        elif text != self.last:
            self.out.write(text + "\n")
        self.last = text
        self.out.flush()


def run(
    options: BenchOptions,
    out_dir: Path,
    environ: Mapping[str, str],
    script: Path | None,
    python: str,
    ctrain: str,
    progress_out: TextIO,
    command: str = "",
    on_result: Callable[[BenchReport], object] | None = None,
) -> BenchReport:
    """Run every worker count in turn (``script``, else ctrain's own benchmark); each run's
    output goes to out_dir/logs/wN.log, the largest run's trace (``--profile``) to
    out_dir/profile."""
    window = profile_window(options)  # a window past the end is refused before any run
    launcher = choose_launcher(
        options.launcher,
        options.mode,
        options.workers,
        proc.which("srun", environ) is not None,
        proc.which("mpirun", environ) is not None,
    )
    report = BenchReport(
        options,
        launcher,
        host=socket.gethostname(),
        started=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        command=command,
    )
    env = child_environ(environ, options.threads)
    units = options.iters + 1  # the warm-up, then each timed iteration
    progress = Progress(units * len(options.workers), progress_out)
    profile_root = out_dir.absolute() / PROFILE_DIR
    for workers in options.workers:
        bench = benchmark_command(
            python,
            None if script is None else str(script),
            options,
            str(_reports_dir(out_dir, workers)),
        )
        traced = window if workers == profiled_workers(options) else None
        flags = profile_flags(traced, str(profile_root)) if traced is not None else []
        argv = _launch(options, launcher, workers, ctrain, bench, flags)
        progress.start_run(f"{workers} worker{'s' if workers > 1 else ''}:")
        before = _profile_runs(profile_root)
        start = time.monotonic()
        rank_reports = _run_one(argv, env, out_dir, workers, progress, options.timeout)
        result = result_from_reports(workers, rank_reports, time.monotonic() - start, argv)
        report.results.append(result)
        if traced is not None:
            added = new_profile_run(before, _profile_runs(profile_root))
            report.profile = _profile_run(profile_root, added, workers, traced)
        progress.finish_run(units, f"{result.total:.1f} images/s")
        if on_result is not None:
            on_result(report)
    return report


def _reports_dir(out_dir: Path, workers: int) -> Path:
    return out_dir / "reports" / f"w{workers}"


def _launch(
    options: BenchOptions,
    launcher: str,
    workers: int,
    ctrain: str,
    bench: list[str],
    launch_options: Sequence[str] = (),
) -> list[str]:
    """The command that starts ``workers`` copies of the benchmark command ``bench``."""
    return launch_argv(
        launcher,
        options.mode,
        workers,
        ctrain,
        bench,
        options.launcher_args,
        as_root=hasattr(os, "geteuid") and os.geteuid() == 0,
        forward=["PATH", *(THREAD_VARIABLES if options.threads else ())],
        launch_options=launch_options,
    )


def _profile_runs(root: Path) -> dict[str, float]:
    """The run directories under the profile directory, with their modification times."""
    if not root.is_dir():
        return {}
    return {entry.name: entry.stat().st_mtime for entry in root.iterdir() if entry.is_dir()}


def _profile_run(root: Path, name: str | None, workers: int, window: StepWindow) -> ProfileRun:
    """What the traced run left in ``root/name``: its table and its traces."""
    if name is None:
        return ProfileRun(workers, str(window), str(root), None)
    directory = root / name
    breakdown = directory / "breakdown.txt"
    traces = sorted(directory.glob("rank-*/plugins/profile/*/*.xplane.pb"))
    timeline = directory / "horovod-timeline.json"
    if timeline.is_file():
        traces.append(timeline)
    written = breakdown.is_file()
    return ProfileRun(
        workers,
        str(window),
        str(directory),
        str(breakdown) if written else None,
        tuple(str(path) for path in traces),
        breakdown.read_text(encoding="utf-8") if written else "",
    )


def _run_one(
    argv: list[str],
    env: Mapping[str, str],
    out_dir: Path,
    workers: int,
    progress: Progress,
    timeout: float,
) -> list[dict[str, object]]:
    """Run one worker count, logging to out_dir/logs/wN.log; the ranks' reports."""
    reports_dir = _reports_dir(out_dir, workers)
    for stale in reports_dir.glob("rank*.json"):
        stale.unlink()
    log_path = out_dir / "logs" / f"w{workers}.log"
    code = _run_logged(argv, env, log_path, progress, timeout)
    if code != 0:
        tail = log_path.read_text().strip().splitlines()[-3:]
        raise ExternalToolError(
            f"the {workers}-worker run exited {code}: {' | '.join(tail)}", f"see {log_path}"
        )
    return [json.loads(p.read_text()) for p in sorted(reports_dir.glob("rank*.json"))]


def _run_logged(
    argv: Sequence[str], env: Mapping[str, str], log_path: Path, progress: Progress, timeout: float
) -> int:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        log.flush()

        def on_line(line: str) -> None:
            log.write(line)
            log.flush()
            done = progress_units(line)
            if done is not None:
                progress.advance_to(done, "warm-up done" if done == 1 else f"iter {done - 1}")

        return proc.stream(argv, env, on_line, timeout=timeout)


def can_plot() -> bool:
    """Whether matplotlib is installed (the ``train`` extra has it; the images do not)."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def write_outputs(report: BenchReport, out_dir: Path) -> dict[str, Path]:
    """bench.json, bench.md and, where matplotlib is installed, speedup.png in ``out_dir``,
    each whole or not at all; the paths by kind (no "plot" without matplotlib)."""
    paths = {"json": out_dir / "bench.json", "markdown": out_dir / "bench.md"}
    out_dir.mkdir(parents=True, exist_ok=True)
    fs.write_text(paths["json"], json.dumps(report.to_json(), indent=2) + "\n")
    fs.write_text(paths["markdown"], markdown_report(report))
    if not can_plot():
        return paths
    paths["plot"] = out_dir / "speedup.png"
    rows = report.rows()
    if rows:
        o = report.options
        mode = "/".join(dict.fromkeys(r.mode for r in rows))
        title = f"{o.model}, {mode}, batch {o.batch}/worker, {o.image_size}px ({report.host})"
        with fs.atomic(paths["plot"]) as temp:
            plot_speedup(rows, temp, title)
    return paths


def plot_speedup(rows: Sequence[Row], path: Path, title: str) -> None:
    """A PNG of the measured speed-up against workers, with the ideal (linear) line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workers = [r.workers for r in rows]
    base, last = workers[0], workers[-1]
    fig, ax = plt.subplots(figsize=(6, 4.2), dpi=110)
    ideal_x = [base, last] if last > base else [base, base * 2]
    ax.plot(ideal_x, [x / base for x in ideal_x], "--", color="0.5", label="ideal (linear)")
    ax.plot(workers, [r.speedup for r in rows], "o-", color="tab:blue", label="measured")
    for r in rows:
        ax.annotate(
            f"{r.speedup:.2f}x ({r.efficiency:.0%})",
            (r.workers, r.speedup),
            textcoords="offset points",
            xytext=(6, -14),
            fontsize=8,
        )
    ax.set_xticks(workers)
    ax.set_xlim(0, max(ideal_x) * 1.25)
    heights = [x / base for x in ideal_x] + [r.speedup for r in rows if math.isfinite(r.speedup)]
    ax.set_ylim(0, max(heights) * 1.1)
    ax.set_xlabel("workers")
    ax.set_ylabel(f"speed-up over {base} worker{'s' if base > 1 else ''}")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    plt.close(fig)
