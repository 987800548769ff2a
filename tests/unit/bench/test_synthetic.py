"""The packaged synthetic benchmark: its options match what `ctrain bench` passes, and it
imports without TensorFlow (TensorFlow is imported only when it runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ctrain.bench import core, synthetic
from tests.support.helpers import REPO, SRC


def test_the_options_ctrain_bench_passes_are_the_benchmarks() -> None:
    options = core.BenchOptions(
        model="MobileNetV2", batch=8, image_size=32, steps=20, iters=4, warmup=3, threads=1
    )
    argv = core.benchmark_command("py", None, options, "out")
    assert argv[1:3] == ["-m", synthetic.__name__]
    args = synthetic.parse_args(argv[3:])
    assert (args.model, args.batch_size, args.image_size) == ("MobileNetV2", 8, 32)
    assert (args.num_warmup_batches, args.num_batches_per_iter, args.num_iters) == (3, 5, 4)
    assert (args.threads, args.report) == (1, "out")


def test_bad_counts_are_refused() -> None:
    with pytest.raises(SystemExit):
        synthetic.parse_args(["--num-iters", "0"])


def test_timer_rates_after_the_warm_up(capsys: pytest.CaptureFixture[str]) -> None:
    timer = synthetic.IterationTimer(warmup=2, per_iter=2, images_per_step=10, chief=True)
    for batch in range(6):
        timer.on_batch_end(batch)
    assert len(timer.rates) == 2 and all(rate > 0 for rate in timer.rates)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Running benchmark..."
    assert [core.progress_units(line) for line in lines] == [1, 2, 3]


def test_runs_as_a_module_and_imports_without_tensorflow() -> None:
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"}
    code = "import sys, ctrain.bench.synthetic; print('tensorflow' in sys.modules)"
    imported = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert imported.stdout.strip() == "False", imported.stderr
    helped = subprocess.run(
        [sys.executable, "-m", "ctrain.bench.synthetic", "--help"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert helped.returncode == 0 and "--num-batches-per-iter" in helped.stdout
