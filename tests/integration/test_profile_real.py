"""``--profile`` for real: unmodified scripts (tests/scripts/) in every launch mode on the local
Slurm and Open MPI, tf-keras and Keras 3. Each run checks that the traces are where they should
be and nowhere else, that TensorBoard's profile plugin (xprof, the dev extra) reads every one
of them, and the shape of the chief's table: the three shares with their notes, adding up to
100 %, and a bottleneck that is the largest of them. Which share is the largest depends on the
machine's load (the script that all-reduces two 2048-wide layers among several workers on 2
busy cores once spent 54 % computing and 45 % in collectives), so no test here asserts it: the
verdict from fixed traces and timelines is tests/unit/train/test_profile_report.py's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN, printed_json
from tests.support.real_runs import BIN, clean_env, run

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
PYTHON = str(BIN / "python")
SRUN = ["srun", "-t", "5", "--kill-on-bad-exit=1"]
WINDOW = "5-9"  # of 16 steps
TIMEOUT = 300

pytestmark = [pytest.mark.slurm, pytest.mark.tensorflow, pytest.mark.timeout(TIMEOUT * 2)]


def profiled(
    tmp_path: Path, launcher: list[str], keras: str, *script: str, mode: str = "auto"
) -> tuple[Path, str]:
    """Run ``ctrain launch --profile`` under ``launcher`` in ``tmp_path``: the run's directory
    (the only one under ctrain-profile/) and what the ranks printed on stderr."""
    argv = [*launcher, CTRAIN, "launch", "--mode", mode, "--keras", keras, "--profile", WINDOW]
    done = run([*argv, "--", PYTHON, *script], clean_env(), timeout=TIMEOUT, cwd=tmp_path)
    assert printed_json(done.stdout, "RESULT"), done.stdout + done.stderr
    (run_dir,) = (tmp_path / "ctrain-profile").iterdir()
    return run_dir, done.stderr


def traced(run_dir: Path) -> dict[int, Path]:
    """Each rank's trace, by rank: exactly one per rank that traces."""
    found: dict[int, Path] = {}
    for rank_dir in sorted(run_dir.glob("rank-*")):
        (trace,) = rank_dir.glob("plugins/profile/*/*.xplane.pb")
        found[int(rank_dir.name.removeprefix("rank-"))] = trace
    return found


def read_by_tensorboard(trace: Path) -> None:
    """What TensorBoard's profile plugin does to show a trace and its overview page."""
    from xprof.convert import raw_to_tool_data

    viewer, kind = raw_to_tool_data.xspace_to_tool_data([str(trace)], "trace_viewer@", {})
    assert kind == "application/json" and b"traceEvents" in viewer
    overview, _ = raw_to_tool_data.xspace_to_tool_data([str(trace)], "overview_page", {})
    assert overview


SHARE_ROW = re.compile(r"^  (\w+) +(\d+\.\d) %(?:   (.*))?$", re.M)
BOTTLENECK = re.compile(r"^  bottleneck: (\w+) \(docs/profiling\.md: what to try\)$", re.M)


def shares(table: str, collectives_of: str) -> dict[str, float]:
    """The chief's shares in percent, by name, checked for the table's shape alone (which share
    is the largest depends on the machine's load)."""
    rows = SHARE_ROW.findall(table)
    assert [(name, note) for name, _, note in rows] == [
        ("input", "waiting for the next batch (tf.data)"),
        ("compute", ""),
        ("collectives", f"{collectives_of} in flight"),
    ], table
    found = {name: float(share) for name, share, _ in rows}
    assert sum(found.values()) == pytest.approx(100.0, abs=0.2), table  # each rounded to 0.1
    (named,) = BOTTLENECK.findall(table)
    assert found[named] == max(found.values()), table
    return found


def checked(run_dir: Path, stderr: str, size: int, ranks: set[int]) -> str:
    """The traces of ``ranks`` only, every rank's timing, and the chief's table: returned."""
    traces = traced(run_dir)
    assert set(traces) == ranks
    for trace in traces.values():
        read_by_tensorboard(trace)
    timings = [json.loads(p.read_text()) for p in sorted((run_dir / "steps").glob("*.json"))]
    assert sorted(t["rank"] for t in timings) == list(range(size))
    assert all(t["steps"] == 5 and t["seconds"] > 0 for t in timings)
    table = (run_dir / "breakdown.txt").read_text()
    assert table.startswith(f"ctrain: profile of steps {WINDOW} (5 steps), {size} rank(s)")
    assert table in stderr + "\n" or table.rstrip("\n") in stderr  # printed by the chief
    return table


@pytest.mark.parametrize("keras", ["2", "3"])
def test_single_an_input_bound_script(tmp_path: Path, keras: str) -> None:
    script = (str(SCRIPTS / "profile_fit.py"), "input")
    run_dir, stderr = profiled(tmp_path, [*SRUN, "-n", "1"], keras, *script)
    shares(checked(run_dir, stderr, 1, {0}), "all-reduce")


def test_mirrored(tmp_path: Path) -> None:
    script = (str(SCRIPTS / "profile_fit.py"), "compute", "mirrored")
    run_dir, stderr = profiled(tmp_path, [*SRUN, "-n", "1"], "2", *script, mode="mirrored")
    shares(checked(run_dir, stderr, 1, {0}), "all-reduce")


def test_multiworker_keras3_a_communication_bound_script(tmp_path: Path) -> None:
    """Three workers on 2 cores: only the chief traces (multiworker's auto), every rank times
    its steps."""
    script = (str(SCRIPTS / "profile_fit.py"), "comm", "multiworker")
    run_dir, stderr = profiled(tmp_path, [*SRUN, "-n", "3", "--overcommit"], "3", *script)
    assert run_dir.name.startswith("job")
    found = shares(checked(run_dir, stderr, 3, {0}), "all-reduce (MultiWorkerMirroredStrategy)")
    assert found["collectives"] > 0  # TensorFlow's collective ops found in its own trace


@pytest.mark.horovod
def test_horovod_under_srun_a_custom_loop(tmp_path: Path) -> None:
    """Horovod's own GradientTape example: the steps are its tf.function's calls."""
    launcher = [*SRUN, "--mpi=pmix", "-n", "2"]
    script = str(SCRIPTS / "hvd_tape.py")
    run_dir, stderr = profiled(tmp_path, launcher, "2", script, mode="horovod")
    shares(checked(run_dir, stderr, 2, {0, 1}), "Horovod negotiation and all-reduce")
    timeline = (run_dir / "horovod-timeline.json").read_text()
    assert "NEGOTIATE_ALLREDUCE" in timeline


@pytest.mark.mpi
@pytest.mark.horovod
def test_horovod_under_mpirun_a_communication_bound_script(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    argv = [CTRAIN, "launch", "--keras", "2", "--profile", WINDOW, "--"]
    command = " ".join([*argv, PYTHON, str(SCRIPTS / "profile_fit.py"), "comm", "horovod"])
    script.write_text(
        f"#!/bin/bash\nset -e\nmpirun --allow-run-as-root -np 2 --bind-to none {command}\n"
    )
    log = tmp_path / "job.log"
    run(
        ["sbatch", "--wait", "-n", "2", "-t", "5", "-o", str(log), str(script)],
        clean_env(),
        timeout=TIMEOUT,
        cwd=tmp_path,
    )
    (run_dir,) = (tmp_path / "ctrain-profile").iterdir()
    shares(checked(run_dir, log.read_text(), 2, {0, 1}), "Horovod negotiation and all-reduce")
