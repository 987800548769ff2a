"""ctrain bench's pure part: the scaling math, the table, the argv builders, the launcher
choice, the progress line, and the result read from the ranks' reports."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import pytest

from ctrain.bench import core
from ctrain.bench.core import BenchOptions, BenchReport, RunResult
from ctrain.errors import ConfigError, ExternalToolError, LaunchError


def result(workers: int, total: float, mode: str = "multiworker") -> RunResult:
    per = total / workers
    return RunResult(workers, mode, per, per * 0.05, total, total * 0.05, (900.0,) * workers, 30.0)


# ------------------------------------------------------------------------------- the math


def test_linear_scaling_is_full_efficiency() -> None:
    rows = core.scaling_rows([result(1, 100), result(2, 200), result(4, 400)])
    assert [r.speedup for r in rows] == [1.0, 2.0, 4.0]
    assert [r.efficiency for r in rows] == [1.0, 1.0, 1.0]


def test_sublinear_scaling() -> None:
    rows = core.scaling_rows([result(2, 180), result(1, 100), result(4, 300)])
    assert [r.workers for r in rows] == [1, 2, 4]  # sorted
    assert rows[1].speedup == pytest.approx(1.8) and rows[1].efficiency == pytest.approx(0.9)
    assert rows[2].speedup == pytest.approx(3.0) and rows[2].efficiency == pytest.approx(0.75)


def test_base_is_the_smallest_count_measured() -> None:
    rows = core.scaling_rows([result(2, 200), result(8, 600)])
    assert rows[0].speedup == 1.0 and rows[0].efficiency == 1.0
    assert rows[1].speedup == pytest.approx(3.0)
    assert rows[1].efficiency == pytest.approx(0.75)  # 3x of an ideal 4x


def test_no_results_no_rows() -> None:
    assert core.scaling_rows([]) == []


def test_zero_base_rate_gives_nan_not_an_exception() -> None:
    rows = core.scaling_rows([result(1, 0.0), result(2, 10.0)])
    assert math.isnan(rows[1].speedup)


def test_mean_and_confidence_as_horovod_reports_them() -> None:
    mean, conf = core.mean_conf([10.0, 12.0, 14.0])
    assert mean == pytest.approx(12.0)
    assert conf == pytest.approx(1.96 * math.sqrt(8 / 3))  # population std, like np.std
    assert core.mean_conf([5.0]) == (5.0, 0.0)
    assert all(math.isnan(x) for x in core.mean_conf([]))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1,2,4", (1, 2, 4)), ("4,1,2", (1, 2, 4)), (" 1, 8 ", (1, 8)), ("2", (2,))],
)
def test_parse_workers(text: str, expected: tuple[int, ...]) -> None:
    assert core.parse_workers(text) == expected


@pytest.mark.parametrize("text", ["", "0,1", "1,x", "1,1", "-2"])
def test_parse_workers_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        core.parse_workers(text)


def test_batches_per_iter_rounds_up() -> None:
    assert BenchOptions(steps=100, iters=10).batches_per_iter == 10
    assert BenchOptions(steps=25, iters=10).batches_per_iter == 3
    assert BenchOptions(steps=1, iters=10).batches_per_iter == 1


# ---------------------------------------------------------------------------- rendering


def test_markdown_table_golden() -> None:
    rows = core.scaling_rows([result(1, 100.0, "single"), result(2, 170.0)])
    assert core.markdown_table(rows) == (
        "| workers | mode | images/s (total) | +- 1.96 std | images/s per worker | speed-up "
        "| scaling efficiency |\n"
        "|--:|:--|--:|--:|--:|--:|--:|\n"
        "| 1 | single | 100.0 | 5.0 | 100.0 | 1.00x | 100% |\n"
        "| 2 | multiworker | 170.0 | 8.5 | 85.0 | 1.70x | 85% |\n"
    )


def test_markdown_report_names_the_command_and_settings() -> None:
    report = BenchReport(
        BenchOptions(model="MobileNetV2", batch=16, image_size=32, threads=1),
        "srun",
        [result(1, 50), result(2, 90)],
        host="node1",
        started="today",
        command="ctrain bench --workers 1,2",
    )
    text = core.markdown_report(report)
    assert text.startswith("# ctrain bench: MobileNetV2\n")
    assert "- command: `ctrain bench --workers 1,2`" in text
    assert "launcher srun, batch 16 per worker, 32x32 images" in text
    assert text.endswith(core.markdown_table(report.rows()))


def test_json_round_trips() -> None:
    report = BenchReport(BenchOptions(workers=(1, 2)), "srun", [result(1, 50), result(2, 90)])
    data = json.loads(json.dumps(report.to_json()))
    assert data["options"]["workers"] == [1, 2]
    assert [r["workers"] for r in data["runs"]] == [1, 2]
    assert data["scaling"][1]["speedup"] == pytest.approx(1.8)


@pytest.mark.parametrize(
    ("done", "total", "expected"),
    [
        (0, 4, "[--------] 0/4  x"),
        (2, 4, "[####----] 2/4  x"),
        (4, 4, "[########] 4/4  x"),
        (9, 4, "[########] 4/4  x"),
        (3, 12, "[##------]  3/12  x"),
    ],
)
def test_progress_line(done: int, total: int, expected: str) -> None:
    assert core.progress_line(done, total, "x", width=8) == expected


@pytest.mark.parametrize(
    ("line", "units"),
    [
        ("Running warmup...\n", None),
        ("Running benchmark...\n", 1),
        ("Iter #0: 12.3 img/sec per worker\n", 2),
        ("Iter #9: 12.3 img/sec per worker\n", 11),
        ("2026 W tensorflow Iter #3 something\n", None),
    ],
)
def test_progress_units(line: str, units: int | None) -> None:
    assert core.progress_units(line) == units


# ------------------------------------------------------------------------ argv builders


CMD = ["python", "core.py"]


def test_srun_argv() -> None:
    assert core.launch_argv("srun", "auto", 4, "/v/ctrain", CMD) == [
        "srun", "-n", "4", "--kill-on-bad-exit=1", "/v/ctrain", "launch", "--", *CMD,
    ]  # fmt: skip


def test_srun_horovod_uses_pmix_and_passes_the_mode() -> None:
    argv = core.launch_argv("srun", "horovod", 2, "ctrain", CMD, ["--gpus-per-task=1"])
    assert argv == [
        "srun", "-n", "2", "--kill-on-bad-exit=1", "--mpi=pmix", "--gpus-per-task=1",
        "ctrain", "launch", "--mode", "horovod", "--", *CMD,
    ]  # fmt: skip


def test_mpirun_argv() -> None:
    argv = core.launch_argv(
        "mpirun", "horovod", 8, "ctrain", CMD, as_root=True, forward=["PATH", "OMP_NUM_THREADS"]
    )
    assert argv == [
        "mpirun", "-np", "8", "--allow-run-as-root", "--bind-to", "none",
        "-x", "PATH", "-x", "OMP_NUM_THREADS",
        "ctrain", "launch", "--mode", "horovod", "--", *CMD,
    ]  # fmt: skip
    assert "--allow-run-as-root" not in core.launch_argv("mpirun", "horovod", 2, "c", CMD)


def test_local_argv_is_ctrain_launch_alone() -> None:
    assert core.launch_argv("local", "single", 1, "ctrain", CMD) == [
        "ctrain", "launch", "--mode", "single", "--", *CMD,
    ]  # fmt: skip


def test_unknown_launcher() -> None:
    with pytest.raises(ConfigError):
        core.launch_argv("pbs", "auto", 1, "ctrain", CMD)


def test_weird_paths_stay_single_arguments() -> None:
    weird = "/tmp/a dir/it's:here\nnow"
    options = BenchOptions(model="MobileNetV2", batch=8, image_size=32, steps=20, iters=4)
    cmd = core.benchmark_command("/py thon", weird + "/s.py", options, weird)
    argv = core.launch_argv("srun", "auto", 2, weird + "/ctrain", cmd)
    assert argv[argv.index("--") + 1 :] == cmd
    assert cmd[:2] == ["/py thon", weird + "/s.py"]
    assert cmd[cmd.index("--report") + 1] == weird


def test_benchmark_command() -> None:
    options = BenchOptions(
        model="MobileNetV2", batch=8, image_size=32, steps=20, iters=4, warmup=3, threads=1
    )
    assert core.benchmark_command("py", "s.py", options, "out") == [
        "py", "s.py", "--model", "MobileNetV2", "--batch-size", "8", "--image-size", "32",
        "--num-warmup-batches", "3", "--num-batches-per-iter", "5", "--num-iters", "4",
        "--threads", "1", "--report", "out",
    ]  # fmt: skip
    assert core.benchmark_command("py", None, options, "out")[:4] == [
        "py", "-m", "ctrain.bench.synthetic", "--model",
    ]  # fmt: skip


def test_child_environ_sets_threads_only_when_asked() -> None:
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "8"}
    assert core.child_environ(base, 0) == base
    env = core.child_environ(base, 2)
    assert env["OMP_NUM_THREADS"] == env["TF_NUM_INTRAOP_THREADS"] == "2"
    assert env["TF_NUM_INTEROP_THREADS"] == "2" and env["PATH"] == "/bin"
    assert base["OMP_NUM_THREADS"] == "8"  # not changed in place


# --------------------------------------------------------------------- launcher choice


@pytest.mark.parametrize(
    ("requested", "mode", "workers", "srun", "mpirun", "expected"),
    [
        ("auto", "auto", (1, 2), True, True, "srun"),
        ("auto", "horovod", (1, 2), True, True, "srun"),
        ("auto", "horovod", (1, 2), False, True, "mpirun"),
        ("auto", "auto", (1, 2), False, True, "mpirun"),
        ("auto", "single", (1,), False, False, "local"),
        ("auto", "auto", (1,), False, False, "local"),
        ("mpirun", "horovod", (2,), True, True, "mpirun"),
        ("local", "mirrored", (1,), True, True, "local"),
        ("srun", "multiworker", (1, 2), True, False, "srun"),
    ],
)
def test_choose_launcher(
    requested: str, mode: str, workers: tuple[int, ...], srun: bool, mpirun: bool, expected: str
) -> None:
    assert core.choose_launcher(requested, mode, workers, srun, mpirun) == expected


@pytest.mark.parametrize(
    ("requested", "mode", "workers", "srun", "mpirun", "error"),
    [
        ("auto", "single", (1, 2), True, True, ConfigError),
        ("auto", "mirrored", (4,), True, True, ConfigError),
        ("local", "auto", (1, 2), True, True, ConfigError),
        ("mpirun", "multiworker", (1, 2), True, True, ConfigError),
        ("srun", "auto", (1, 2), False, True, ExternalToolError),
        ("auto", "multiworker", (1, 2), False, True, ExternalToolError),
        ("auto", "auto", (2,), False, False, ExternalToolError),
    ],
)
def test_choose_launcher_refuses(
    requested: str,
    mode: str,
    workers: tuple[int, ...],
    srun: bool,
    mpirun: bool,
    error: type[Exception],
) -> None:
    with pytest.raises(error):
        core.choose_launcher(requested, mode, workers, srun, mpirun)


# ---------------------------------------------------------------------- reports -> result


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


def test_result_from_reports_uses_the_chief_and_everyones_memory() -> None:
    found = core.result_from_reports(
        2, [rank_report(1, [1.0]), rank_report(0, [10.0, 12.0, 14.0])], 40.0, ["srun"]
    )
    assert found.per_worker == pytest.approx(12.0)
    assert found.total == pytest.approx(24.0)
    assert found.total_conf == pytest.approx(2 * found.per_worker_conf)
    assert found.peak_rss_mb == (900.0, 901.0)
    assert found.first_step_s == pytest.approx(12.5)
    assert found.mode == "multiworker"


def test_result_from_reports_counts_the_ranks() -> None:
    with pytest.raises(LaunchError, match="2 workers were asked for but 1 reports"):
        core.result_from_reports(2, [rank_report(0, [1.0])], 1.0, [])
