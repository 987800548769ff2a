"""`ctrain bench` end to end on the local Slurm: srun at 1 and 2 workers, then the JSON, the
Markdown table and the PNG plot. In auto mode only the profiled bench runs here (its 2-worker
run traced); test_installed_wheel.py's bench, with the same checks, is the unprofiled one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN
from tests.support.real_runs import TINY, check_outputs, clean_env


def bench(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [CTRAIN, "bench", *args, *TINY, "--out", str(out)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.slurm
@pytest.mark.horovod
def test_bench_horovod_under_srun_pmix(tmp_path: Path) -> None:
    bench(tmp_path, "--mode", "horovod", "--workers", "1,2")
    data = check_outputs(tmp_path, ["horovod", "horovod"])
    assert "--mpi=pmix" in data["runs"][1]["argv"]  # type: ignore[index]


@pytest.mark.slurm
@pytest.mark.tensorflow
def test_bench_profile_traces_the_largest_run_only(tmp_path: Path) -> None:
    done = bench(tmp_path, "--workers", "1,2", "--profile", "3-4")  # of 2 + 6 steps
    data = check_outputs(tmp_path, ["single", "multiworker"])
    assert "| 2 | multiworker |" in done.stdout  # the table on stdout
    assert "2/8" in done.stderr and "8/8" in done.stderr  # the progress bar on stderr
    profile = data["profile"]
    assert isinstance(profile, dict) and profile["workers"] == 2 and profile["steps"] == "3-4"
    root = tmp_path.absolute() / "profile"
    runs = [p for p in root.iterdir() if p.is_dir()]
    assert [str(p) for p in runs] == [profile["directory"]]  # one run traced: the 2-worker one
    run_dir = runs[0]
    assert run_dir.name.startswith("job")  # srun's job and step: launch/profile.py's name
    assert profile["breakdown"] == str(run_dir / "breakdown.txt")
    table = (run_dir / "breakdown.txt").read_text()
    assert table.startswith("ctrain: profile of steps 3-4 (2 steps), 2 rank(s)")
    assert "compute" in table and "collectives" in table
    traces = sorted(run_dir.glob("rank-*/plugins/profile/*/*.xplane.pb"))
    # multiworker: the chief alone traces (launch/profile.py's traced_ranks); both time
    assert {p.relative_to(run_dir).parts[0] for p in traces} == {"rank-0"}
    assert sorted(p.name for p in (run_dir / "steps").iterdir()) == ["rank-0.json", "rank-1.json"]
    assert [str(p) for p in traces] == profile["traces"]
    assert all(p.stat().st_size > 0 for p in traces)
    logs = tmp_path / "logs"
    assert "--profile" not in (logs / "w1.log").read_text().splitlines()[0]
    assert f"--profile 3-4 --profile-dir {root} --" in (logs / "w2.log").read_text()
    markdown = (tmp_path / "bench.md").read_text()
    assert f"- where the time went: `{run_dir}/breakdown.txt`" in markdown
    assert f"profile of the 2-worker run: {run_dir}/breakdown.txt" in done.stdout
