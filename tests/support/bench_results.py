"""What the bench tests feed ctrain's report: a run's result and a rank's report."""

from __future__ import annotations

from collections.abc import Sequence

from ctrain.bench.report import RunResult


def result(workers: int, total: float, mode: str = "multiworker") -> RunResult:
    per = total / workers
    return RunResult(workers, mode, per, per * 0.05, total, total * 0.05, (900.0,) * workers, 30.0)


def rank_report(rank: int, rates: Sequence[float], replicas: int = 2) -> dict[str, object]:
    return {
        "rank": rank,
        "replicas": replicas,
        "mode": "multiworker",
        "rates": list(rates),
        "peak_rss_mb": 900.0 + rank,
        "started_at": 100.0,
        "first_step_at": 112.5,
    }
