"""ctrain bench's side effects without Slurm: the run loop with a recording fake of
proc.stream, the outputs (JSON, Markdown, PNG), and the CLI."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctrain.bench import run
from ctrain.bench.core import BenchOptions
from ctrain.bench.profile import ProfileRun
from ctrain.bench.report import scaling_rows
from ctrain.cli import main
from ctrain.errors import ConfigError, ExternalToolError
from ctrain.profile_window import parse_window
from ctrain.util import proc
from tests.support.bench_results import rank_report, result


def test_plot_is_a_png(tmp_path: Path) -> None:
    rows = scaling_rows([result(1, 100), result(2, 190), result(4, 350)])
    path = tmp_path / "sub" / "speedup.png"
    run.plot_speedup(rows, path, "a title")
    assert path.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert path.stat().st_size > 10_000


def test_plot_of_one_count(tmp_path: Path) -> None:
    run.plot_speedup(scaling_rows([result(1, 100)]), tmp_path / "one.png", "one")
    assert (tmp_path / "one.png").is_file()


# ------------------------------------------------------------------- the run loop, faked


class FakeStream:
    """Stands in for proc.stream: records argv, writes the ranks' reports, prints lines."""

    def __init__(self, rate_per_worker: Callable[[int], float], code: int = 0) -> None:
        self.rate_per_worker, self.code = rate_per_worker, code
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def __call__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        on_line: Callable[[str], None],
        timeout: float | None = None,
    ) -> int:
        self.calls.append((list(argv), dict(env or {})))
        workers = int(argv[argv.index("-n") + 1])
        report = Path(argv[argv.index("--report") + 1])
        report.mkdir(parents=True, exist_ok=True)
        rate = self.rate_per_worker(workers)
        for rank in range(workers):
            data = rank_report(rank, [rate, rate], replicas=workers)
            (report / f"rank{rank}.json").write_text(json.dumps(data))
        on_line("Running benchmark...\n")
        on_line(f"Iter #0: {rate} img/sec per worker\n")
        on_line(f"Iter #1: {rate} img/sec per worker\n")
        return self.code


@pytest.fixture
def fake_stream(monkeypatch: pytest.MonkeyPatch) -> FakeStream:
    fake = FakeStream(lambda workers: 100.0 - 10 * (workers - 1))
    monkeypatch.setattr(proc, "stream", fake)
    monkeypatch.setattr(proc, "which", lambda program, env=None: f"/usr/bin/{program}")
    return fake


def test_run_loop_with_a_fake_launcher(tmp_path: Path, fake_stream: FakeStream) -> None:
    options = BenchOptions(workers=(1, 2, 4), iters=2, steps=4, threads=1)
    progress = io.StringIO()
    seen: list[int] = []
    report = run.run(
        options,
        tmp_path,
        {"PATH": "/bin"},
        Path("/x/synthetic_benchmark.py"),
        "/v/python",
        "/v/ctrain",
        progress_out=progress,
        on_result=lambda partial: seen.append(len(partial.results)),
    )
    assert report.launcher == "srun"
    assert [argv[:3] for argv, _ in fake_stream.calls] == [
        ["srun", "-n", "1"],
        ["srun", "-n", "2"],
        ["srun", "-n", "4"],
    ]
    assert all(env["TF_NUM_INTRAOP_THREADS"] == "1" for _, env in fake_stream.calls)
    assert seen == [1, 2, 3]
    rows = report.rows()
    assert [round(r.total) for r in rows] == [100, 180, 280]
    assert rows[-1].efficiency == pytest.approx(0.7)
    lines = progress.getvalue().splitlines()
    assert lines[-1].startswith("[########################] 9/9  4 workers:")
    assert (tmp_path / "logs" / "w2.log").read_text().startswith("$ srun -n 2 ")
    paths = run.write_outputs(report, tmp_path)
    assert json.loads(paths["json"].read_text())["scaling"][2]["workers"] == 4
    assert "| 4 | multiworker | 280.0 |" in paths["markdown"].read_text()
    assert paths["plot"].is_file()


def test_a_failed_run_names_its_log(tmp_path: Path, fake_stream: FakeStream) -> None:
    fake_stream.code = 3
    with pytest.raises(ExternalToolError, match="1-worker run exited 3") as caught:
        run.run(BenchOptions(workers=(1,)), tmp_path, {}, Path("s.py"), "py", "ctrain",
                  progress_out=io.StringIO())  # fmt: skip
    assert str(tmp_path / "logs" / "w1.log") in caught.value.fix


def test_stale_reports_are_removed_first(tmp_path: Path, fake_stream: FakeStream) -> None:
    stale = tmp_path / "reports" / "w1"
    stale.mkdir(parents=True)
    (stale / "rank5.json").write_text("{}")
    run.run(BenchOptions(workers=(1,)), tmp_path, {}, Path("s.py"), "py", "ctrain",
              progress_out=io.StringIO())  # fmt: skip
    assert not (stale / "rank5.json").exists()


# ------------------------------------------------------------------------------- the CLI


def test_bench_help() -> None:
    result_ = CliRunner().invoke(main, ["bench", "--help"], catch_exceptions=False)
    assert result_.exit_code == 0
    for option in ("--mode", "--workers", "--model", "--batch", "--steps", "--out"):
        assert option in result_.output


def test_bench_cli_end_to_end_with_a_fake_launcher(tmp_path: Path, fake_stream: FakeStream) -> None:
    script = tmp_path / "synthetic_benchmark.py"
    script.write_text("")
    out = tmp_path / "out"
    args = ["bench", "--workers", "1,2", "--model", "MobileNetV2", "--batch", "8",
            "--script", str(script), "--out", str(out)]  # fmt: skip
    result_ = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result_.exit_code == 0, result_.output
    assert "| 2 | multiworker | 180.0 |" in result_.output
    assert {p.name for p in out.iterdir()} >= {"bench.json", "bench.md", "speedup.png"}
    argv = fake_stream.calls[0][0]
    assert argv[argv.index("--model") + 1] == "MobileNetV2"
    assert argv[argv.index("--batch-size") + 1] == "8"


def test_without_matplotlib_the_table_is_written_and_the_plot_named_missing(
    tmp_path: Path, fake_stream: FakeStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "can_plot", lambda: False)
    out = tmp_path / "out"
    args = ["bench", "--workers", "1,2", "--out", str(out)]
    result_ = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result_.exit_code == 0, result_.output
    assert {p.name for p in out.iterdir()} == {"bench.json", "bench.md", "logs", "reports"}
    assert "plot: not drawn, matplotlib is not installed here" in result_.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "--workers '0': needs counts of at least 1"),
        (["--mode", "single", "--workers", "1,2"], "--mode single runs one process"),
        (["--script", "/nonexistent/s.py"], "no benchmark script at /nonexistent/s.py"),
        (["--steps", "0"], "--steps '0': must be a positive integer"),
    ],
)
def test_bench_cli_errors_are_one_line(args: list[str], message: str) -> None:
    result_ = CliRunner().invoke(main, ["bench", *args])
    assert result_.exit_code == 2, result_.output
    assert result_.output.startswith("ctrain: error: ") and message in result_.output
    assert "Traceback" not in result_.output


def test_without_a_script_the_packaged_benchmark_runs(
    tmp_path: Path, fake_stream: FakeStream
) -> None:
    run.run(BenchOptions(workers=(1,)), tmp_path, {}, None, "/v/python", "/v/ctrain",
            progress_out=io.StringIO())  # fmt: skip
    argv = fake_stream.calls[0][0]
    assert argv[argv.index("--") + 1 :][:3] == ["/v/python", "-m", "ctrain.bench.synthetic"]


# ------------------------------------------------------------------- --profile, faked


class ProfilingFakeStream(FakeStream):
    """Also does what ``ctrain launch --profile`` leaves: a run directory, as srun names it,
    with the chief's trace and table."""

    def __call__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        on_line: Callable[[str], None],
        timeout: float | None = None,
    ) -> int:
        if "--profile-dir" in argv:
            run_dir = Path(argv[argv.index("--profile-dir") + 1]) / f"job{len(self.calls)}.0"
            trace = run_dir / "rank-0" / "plugins" / "profile" / "2026_01_01" / "vm.xplane.pb"
            trace.parent.mkdir(parents=True)
            trace.write_bytes(b"")
            (run_dir / "breakdown.txt").write_text("ctrain: profile of steps 3-4\n")
        return super().__call__(argv, env, on_line, timeout)


@pytest.fixture
def profiling_stream(monkeypatch: pytest.MonkeyPatch) -> ProfilingFakeStream:
    fake = ProfilingFakeStream(lambda workers: 100.0)
    monkeypatch.setattr(proc, "stream", fake)
    monkeypatch.setattr(proc, "which", lambda program, env=None: f"/usr/bin/{program}")
    return fake


def test_only_the_largest_run_traces(tmp_path: Path, profiling_stream: ProfilingFakeStream) -> None:
    options = BenchOptions(
        workers=(1, 2, 4), iters=2, steps=4, warmup=2, profile=parse_window("3-4")
    )
    environ = {"PATH": "/bin", "CTRAIN_PROFILE": "2-3"}  # launch's own setting: not passed on
    report = run.run(options, tmp_path / "out", environ, None, "py", "ctrain",
                     progress_out=io.StringIO())  # fmt: skip
    profile_dir = str((tmp_path / "out" / "profile").absolute())
    launched = [argv[argv.index("launch") : argv.index("--")] for argv, _ in profiling_stream.calls]
    assert launched == [
        ["launch"],
        ["launch"],
        ["launch", "--profile", "3-4", "--profile-dir", profile_dir],
    ]
    assert all("CTRAIN_PROFILE" not in env for _, env in profiling_stream.calls)
    run_dir = f"{profile_dir}/job2.0"
    assert report.profile == ProfileRun(
        4,
        "3-4",
        run_dir,
        f"{run_dir}/breakdown.txt",
        (f"{run_dir}/rank-0/plugins/profile/2026_01_01/vm.xplane.pb",),
        "ctrain: profile of steps 3-4\n",
    )
    paths = run.write_outputs(report, tmp_path / "out")
    assert f"- where the time went: `{run_dir}/breakdown.txt`" in paths["markdown"].read_text()
    assert json.loads(paths["json"].read_text())["profile"]["directory"] == run_dir


def test_an_earlier_trace_is_not_taken_for_this_one(
    tmp_path: Path, profiling_stream: FakeStream
) -> None:
    old = tmp_path / "profile" / "job9.0"
    old.mkdir(parents=True)
    (old / "breakdown.txt").write_text("an earlier bench's\n")
    options = BenchOptions(workers=(2,), iters=2, steps=4, warmup=2, profile=parse_window("3-4"))
    report = run.run(options, tmp_path, {}, None, "py", "ctrain", progress_out=io.StringIO())
    assert report.profile is not None
    assert report.profile.directory == str(tmp_path.absolute() / "profile" / "job0.0")
    assert (old / "breakdown.txt").read_text() == "an earlier bench's\n"  # left alone


def test_a_run_that_wrote_no_trace_is_reported_so(tmp_path: Path, fake_stream: FakeStream) -> None:
    options = BenchOptions(workers=(1, 2), iters=2, steps=4, warmup=2, profile=parse_window("3-4"))
    report = run.run(options, tmp_path, {}, None, "py", "ctrain", progress_out=io.StringIO())
    assert report.profile == ProfileRun(2, "3-4", str(tmp_path.absolute() / "profile"), None)
    assert "--profile" in fake_stream.calls[1][0] and "--profile" not in fake_stream.calls[0][0]


def test_a_window_past_the_end_is_refused_before_anything_runs(
    tmp_path: Path, fake_stream: FakeStream
) -> None:
    options = BenchOptions(workers=(1, 2), iters=2, steps=4, warmup=2, profile=parse_window("5-7"))
    with pytest.raises(ConfigError, match="--profile 5-7 ends after the 2-worker run's last step"):
        run.run(options, tmp_path, {}, None, "py", "ctrain", progress_out=io.StringIO())
    assert fake_stream.calls == []
    assert not (tmp_path / "logs").exists()


def test_bench_cli_profile(tmp_path: Path, profiling_stream: ProfilingFakeStream) -> None:
    out = tmp_path / "out"
    args = ["bench", "--workers", "1,2", "--steps", "4", "--iters", "2", "--warmup", "2",
            "--profile", "3-4", "--out", str(out)]  # fmt: skip
    result_ = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result_.exit_code == 0, result_.output
    breakdown = out.absolute() / "profile" / "job1.0" / "breakdown.txt"
    assert f"profile of the 2-worker run: {breakdown}\n" in result_.output
    assert json.loads((out / "bench.json").read_text())["options"]["profile"] == "3-4"


def test_bench_cli_profile_from_the_environment(
    tmp_path: Path, profiling_stream: ProfilingFakeStream
) -> None:
    args = ["bench", "--workers", "2", "--steps", "4", "--iters", "2", "--warmup", "2",
            "--out", str(tmp_path)]  # fmt: skip
    env = {"CTRAIN_BENCH_PROFILE": " 3 - 4 "}
    result_ = CliRunner().invoke(main, args, env=env, catch_exceptions=False)
    assert result_.exit_code == 0, result_.output
    argv = profiling_stream.calls[0][0]
    assert argv[argv.index("--profile") + 1] == "3-4"  # the setting's parser wrote it


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile", "1-3"], "--profile '1-3': the first step traces and compiles the model"),
        (["--profile", "5"], "ctrain: error: --profile 5-5 ends after the 2-worker run's last "
         "step: it trains 4 steps (2 warm-up + 2 timed) Fix: trace steps 2-4 at most, e.g. "
         "--profile 3-4, or raise --steps\n"),
    ],
)  # fmt: skip
def test_bench_cli_profile_errors_are_one_line(
    args: list[str], message: str, fake_stream: FakeStream
) -> None:
    tiny = ["--workers", "1,2", "--steps", "2", "--iters", "2", "--warmup", "2"]
    result_ = CliRunner().invoke(main, ["bench", *tiny, *args])
    assert result_.exit_code == 2, result_.output
    assert result_.output.startswith("ctrain: error: ") and message in result_.output
    assert result_.output.count("\n") == 1
    assert fake_stream.calls == []
