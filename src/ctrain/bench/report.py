"""``ctrain bench``'s results: each worker count's run read from its ranks' reports, the
scaling math (speed-up and efficiency against the smallest count) and the Markdown report. Pure;
the options and the argv builders are bench/core.py's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ctrain.bench.core import BenchOptions
from ctrain.bench.profile import ProfileRun, markdown_profile
from ctrain.errors import LaunchError


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
            "options": {
                **asdict(self.options),
                "workers": list(self.options.workers),
                "profile": None if self.options.profile is None else str(self.options.profile),
            },
            "launcher": self.launcher,
            "host": self.host,
            "started": self.started,
            "command": self.command,
            "runs": [asdict(r) for r in self.results],
            "scaling": [asdict(r) for r in self.rows()],
            "profile": None if self.profile is None else asdict(self.profile),
        }


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
    if report.profile is not None and o.profile is not None:
        text += "\n" + markdown_profile(report.profile, o.profile, o.warmup)
    return text


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
