"""ctrain bench's pure part: the scaling math, the table, the argv builders, the launcher
choice, the progress line, and the result read from the ranks' reports."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ctrain.bench import core
from ctrain.bench import profile as bench_profile
from ctrain.bench import report as bench_report
from ctrain.bench.core import BenchOptions
from ctrain.bench.report import BenchReport
from ctrain.errors import ConfigError, ExternalToolError, LaunchError
from ctrain.profile_window import StepWindow, parse_window
from ctrain.settings import parse_flag, resolve
from ctrain.settings_table import Settings
from tests.support.bench_results import rank_report, result

# ------------------------------------------------------------------------------- the math


def test_linear_scaling_is_full_efficiency() -> None:
    rows = bench_report.scaling_rows([result(1, 100), result(2, 200), result(4, 400)])
    assert [r.speedup for r in rows] == [1.0, 2.0, 4.0]
    assert [r.efficiency for r in rows] == [1.0, 1.0, 1.0]


def test_sublinear_scaling() -> None:
    rows = bench_report.scaling_rows([result(2, 180), result(1, 100), result(4, 300)])
    assert [r.workers for r in rows] == [1, 2, 4]  # sorted
    assert rows[1].speedup == pytest.approx(1.8) and rows[1].efficiency == pytest.approx(0.9)
    assert rows[2].speedup == pytest.approx(3.0) and rows[2].efficiency == pytest.approx(0.75)


def test_base_is_the_smallest_count_measured() -> None:
    rows = bench_report.scaling_rows([result(2, 200), result(8, 600)])
    assert rows[0].speedup == 1.0 and rows[0].efficiency == 1.0
    assert rows[1].speedup == pytest.approx(3.0)
    assert rows[1].efficiency == pytest.approx(0.75)  # 3x of an ideal 4x


def test_no_results_no_rows() -> None:
    assert bench_report.scaling_rows([]) == []


def test_zero_base_rate_gives_nan_not_an_exception() -> None:
    rows = bench_report.scaling_rows([result(1, 0.0), result(2, 10.0)])
    assert math.isnan(rows[1].speedup)


def test_mean_and_confidence_as_horovod_reports_them() -> None:
    mean, conf = bench_report.mean_conf([10.0, 12.0, 14.0])
    assert mean == pytest.approx(12.0)
    assert conf == pytest.approx(1.96 * math.sqrt(8 / 3))  # population std, like np.std
    assert bench_report.mean_conf([5.0]) == (5.0, 0.0)
    assert all(math.isnan(x) for x in bench_report.mean_conf([]))


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1,2,4", (1, 2, 4)), ("4,1,2", (1, 2, 4)), (" 1, 8 ", (1, 8)), ("2", (2,))],
)
def test_workers_are_parsed_once_by_their_setting(
    text: str, expected: tuple[int, ...], tmp_path: Path
) -> None:
    settings = resolve({}, {"HOME": str(tmp_path), "CTRAIN_BENCH_WORKERS": text}, tmp_path)
    assert BenchOptions.from_settings(settings).workers == expected


@pytest.mark.parametrize("text", ["", "0,1", "1,x", "1,1", "-2"])
def test_bad_workers_are_blamed_on_the_flag(text: str) -> None:
    with pytest.raises(ConfigError, match="^--workers "):
        parse_flag("bench_workers", text)


def test_bad_workers_variable_is_blamed_on_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve({}, {"HOME": str(tmp_path), "CTRAIN_BENCH_WORKERS": "x"}, tmp_path)
    assert str(caught.value).startswith("CTRAIN_BENCH_WORKERS='x': ")
    assert "--workers" not in str(caught.value)


def test_bench_options_default_to_the_settings() -> None:
    assert BenchOptions.from_settings(Settings()) == BenchOptions()


def test_batches_per_iter_rounds_up() -> None:
    assert BenchOptions(steps=100, iters=10).batches_per_iter == 10
    assert BenchOptions(steps=25, iters=10).batches_per_iter == 3
    assert BenchOptions(steps=1, iters=10).batches_per_iter == 1


# ---------------------------------------------------------------------------- rendering


def test_markdown_table_golden() -> None:
    rows = bench_report.scaling_rows([result(1, 100.0, "single"), result(2, 170.0)])
    assert bench_report.markdown_table(rows) == (
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
    text = bench_report.markdown_report(report)
    assert text.startswith("# ctrain bench: MobileNetV2\n")
    assert "- command: `ctrain bench --workers 1,2`" in text
    assert "launcher srun, batch 16 per worker, 32x32 images" in text
    assert text.endswith(bench_report.markdown_table(report.rows()))


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


def test_result_from_reports_uses_the_chief_and_everyones_memory() -> None:
    found = bench_report.result_from_reports(
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
        bench_report.result_from_reports(2, [rank_report(0, [1.0])], 1.0, [])


# ------------------------------------------------------------------ --profile, pure part


def steps_of(window: str | None) -> StepWindow | None:
    return None if window is None else parse_window(window)


def test_run_steps_are_the_warm_up_and_whole_iterations() -> None:
    assert BenchOptions(warmup=10, steps=100, iters=10).run_steps == 110
    assert BenchOptions(warmup=2, steps=25, iters=10).timed_steps == 30  # 3 per iteration
    assert BenchOptions(warmup=2, steps=25, iters=10).run_steps == 32
    assert BenchOptions(warmup=1, steps=1, iters=1).run_steps == 2


@pytest.mark.parametrize(
    ("warmup", "steps", "iters", "window", "expected"),
    [
        (10, 100, 10, None, None),
        (10, 100, 10, "20-25", (20, 25)),
        (10, 100, 10, "110", (110, 110)),  # the run's last step
        (10, 100, 10, "2-10", (2, 10)),  # within the warm-up
        (2, 6, 3, "3-8", (3, 8)),  # 2 warm-up + 3 x 2 timed: ends on the last step
        (2, 25, 10, "30-32", (30, 32)),  # 25 steps are 3 per iteration: 30 timed
    ],
)
def test_profile_window_inside_the_run(
    warmup: int, steps: int, iters: int, window: str | None, expected: tuple[int, int] | None
) -> None:
    options = BenchOptions(warmup=warmup, steps=steps, iters=iters, profile=steps_of(window))
    assert core.profile_window(options) == expected


@pytest.mark.parametrize(
    ("warmup", "steps", "iters", "window", "message", "fix"),
    [
        (
            10, 100, 10, "105-111",
            "--profile 105-111 ends after the 4-worker run's last step: it trains 110 steps "
            "(10 warm-up + 100 timed)",
            "trace steps 2-110 at most, e.g. --profile 11-15, or raise --steps",
        ),
        (
            2, 6, 3, "9",
            "--profile 9-9 ends after the 4-worker run's last step: it trains 8 steps "
            "(2 warm-up + 6 timed)",
            "trace steps 2-8 at most, e.g. --profile 3-7, or raise --steps",
        ),
        (
            1, 1, 1, "3-4",
            "--profile 3-4 ends after the 4-worker run's last step: it trains 2 steps "
            "(1 warm-up + 1 timed)",
            "trace steps 2-2 at most, e.g. --profile 2-2, or raise --steps",
        ),
    ],
)  # fmt: skip
def test_profile_window_past_the_end_is_refused(
    warmup: int, steps: int, iters: int, window: str, message: str, fix: str
) -> None:
    options = BenchOptions(workers=(1, 2, 4), warmup=warmup, steps=steps, iters=iters,
                           profile=parse_window(window))  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        core.profile_window(options)
    assert (caught.value.message, caught.value.fix) == (message, fix)
    assert "\n" not in caught.value.line()


@pytest.mark.parametrize("window", ["1-5", "x", "9-3"])
def test_profile_window_malformed(window: str) -> None:
    with pytest.raises(ConfigError, match=f"--profile '{window}': "):
        parse_flag("bench_profile", window)  # the setting's one parse, before the options


@pytest.mark.parametrize(
    ("workers", "window", "expected"),
    [((1, 2, 4), "3-4", 4), ((2,), "3-4", 2), ((1, 2, 4), None, None)],
)
def test_only_the_largest_run_traces(
    workers: tuple[int, ...], window: str | None, expected: int | None
) -> None:
    assert (
        core.profiled_workers(BenchOptions(workers=workers, profile=steps_of(window))) == expected
    )


def test_profile_flags() -> None:
    window = parse_window("3-5")
    assert bench_profile.profile_flags(window, "/o/profile") == [
        "--profile", "3-5", "--profile-dir", "/o/profile",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("launcher", "head"),
    [
        ("srun", ["srun", "-n", "2", "--kill-on-bad-exit=1", "--mpi=pmix", "ctrain"]),
        ("mpirun", ["mpirun", "-np", "2", "--bind-to", "none", "ctrain"]),
        ("local", ["ctrain"]),
    ],
)
def test_launch_options_go_to_ctrain_launch(launcher: str, head: list[str]) -> None:
    flags = ["--profile", "3-5", "--profile-dir", "/o/profile"]
    argv = core.launch_argv(launcher, "horovod", 2, "ctrain", CMD, launch_options=flags)
    assert argv == [*head, "launch", "--mode", "horovod", *flags, "--", *CMD]
    auto = core.launch_argv("srun", "auto", 2, "ctrain", CMD, launch_options=flags)
    assert auto[auto.index("launch") :] == ["launch", *flags, "--", *CMD]


def test_child_environ_leaves_the_profile_to_bench() -> None:
    base = {"PATH": "/bin", "CTRAIN_PROFILE": "3-5", "CTRAIN_PROFILE_RANKS": "all"}
    env = core.child_environ(base, 0)
    assert env == {"PATH": "/bin", "CTRAIN_PROFILE_RANKS": "all"}
    assert base["CTRAIN_PROFILE"] == "3-5"  # not changed in place


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ((), {}, None),
        ((), {"job7.0": 5.0}, "job7.0"),
        (("job7.0",), {"job7.0": 5.0}, None),
        (("job7.0",), {"job7.0": 9.0, "job8.0": 6.0}, "job8.0"),  # new, though older
        ((), {"pid1": 6.0, "pid2": 7.0}, "pid2"),  # the newest of several
        ((), {"b": 7.0, "a": 7.0}, "b"),  # a tie: the same answer every time
    ],
)
def test_new_profile_run(
    before: tuple[str, ...], after: dict[str, float], expected: str | None
) -> None:
    assert bench_profile.new_profile_run(before, after) == expected


TABLE = "ctrain: profile of steps 6-7 (2 steps), 2 rank(s), in /o/profile/job7.0\n  input 1 %\n"


def profiled_report(profile: bench_profile.ProfileRun) -> BenchReport:
    window = parse_window(profile.steps)
    options = BenchOptions(workers=(1, 2), warmup=5, steps=6, iters=3, profile=window)
    return BenchReport(options, "srun", [result(1, 50), result(2, 90)], host="n", started="t",
                       profile=profile)  # fmt: skip


def test_markdown_report_names_the_trace_and_the_breakdown() -> None:
    trace = "/o/profile/job7.0/rank-0/plugins/profile/2026_01_01/n.xplane.pb"
    profile = bench_profile.ProfileRun(
        2, "6-7", "/o/profile/job7.0", "/o/profile/job7.0/breakdown.txt", (trace,), TABLE
    )
    text = bench_report.markdown_report(profiled_report(profile))
    assert bench_report.markdown_table(profiled_report(profile).rows()) in text
    assert text.endswith(
        "## Profile of the 2-worker run\n\n"
        "Steps 6-7 traced (`ctrain launch --profile 6-7`); its images/s include the traced "
        "steps.\n\n"
        "- run directory: `/o/profile/job7.0`\n"
        "- where the time went: `/o/profile/job7.0/breakdown.txt`\n"
        f"- trace: `{trace}`\n"
        "- view: `tensorboard --logdir /o/profile/job7.0/rank-0`, tab Profile\n\n"
        f"```text\n{TABLE.rstrip()}\n```\n"
    )


def test_markdown_report_of_a_window_in_the_warm_up() -> None:
    profile = bench_profile.ProfileRun(2, "2-5", "/o/p/job7.0", "/o/p/job7.0/breakdown.txt")
    text = bench_report.markdown_report(profiled_report(profile))
    assert "all in the warm-up, so its images/s do not include them." in text
    assert "include the traced steps" not in text
    assert "tensorboard" not in text  # no trace, nothing to view


def test_markdown_report_says_when_no_breakdown_was_written() -> None:
    text = bench_report.markdown_report(
        profiled_report(bench_profile.ProfileRun(2, "6-7", "/o/profile", None))
    )
    assert "- run directory: `/o/profile`\n" in text
    assert "- no breakdown.txt was written: see the run's log, logs/w2.log\n" in text
    assert "where the time went" not in text and "```" not in text


def test_markdown_report_without_profile_has_no_profile_section() -> None:
    report = BenchReport(BenchOptions(), "srun", [result(1, 50)])
    assert "Profile" not in bench_report.markdown_report(report)
    assert report.to_json()["profile"] is None


def test_json_names_the_profile() -> None:
    profile = bench_profile.ProfileRun(
        2, "6-7", "/o/p/job7.0", "/o/p/job7.0/breakdown.txt", ("/t",), "x"
    )
    data = json.loads(json.dumps(profiled_report(profile).to_json()))
    assert data["options"]["profile"] == "6-7"
    assert data["profile"] == {
        "workers": 2, "steps": "6-7", "directory": "/o/p/job7.0",
        "breakdown": "/o/p/job7.0/breakdown.txt", "traces": ["/t"], "table": "x",
    }  # fmt: skip
