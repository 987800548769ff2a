"""``ctrain job render --check-network``: the network check as the job's first step, through the
step's own launcher and container line; off by default (the other golden files stay as they are).

Its golden files (`*-check-network.sbatch`) are test_jobs.py's cases, shellchecked there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctrain.cli import main
from ctrain.errors import CtrainError
from ctrain.names import JOB_MODES
from ctrain.slurm import jobs, network_job
from ctrain.slurm.request import JobRequest
from tests.support.helpers import REPO

GOLDEN = REPO / "tests" / "unit" / "golden" / "jobs"
CHECK_LINE = "ctrain doctor --network)"


@pytest.mark.parametrize("runtime", ["auto", "pyxis"])
@pytest.mark.parametrize("mode", JOB_MODES)
def test_the_check_is_the_training_step_with_doctor_for_the_command(
    mode: str, runtime: str
) -> None:
    if runtime == "pyxis" and mode == "horovod-mpirun":
        return  # refused: pyxis' containers start only as srun steps
    gpus = 0 if mode == "single" else 2
    request = JobRequest(mode, ("python", "t.py"), gpus_per_node=gpus, runtime=runtime)
    off = jobs.render(request)
    on = jobs.render(JobRequest(**{**request.__dict__, "check_network": True}))
    assert "network_check" not in off
    step = next(line for line in on.splitlines() if line.startswith("step=("))
    check = next(line for line in on.splitlines() if line.startswith("network_check=("))
    assert check == step.replace('"$@")', CHECK_LINE).replace("step=(", "network_check=(")
    # before the training step starts, after the image is resolved; the rest as it was
    assert on.index("image=$(ctrain resolve") < on.index(check) < on.index('"${step[@]}" &')
    start = check.removeprefix("network_check=(").removesuffix(" -- " + CHECK_LINE)
    assert on.replace(network_job.block(start), "") == off


def test_a_damaged_template_is_refused() -> None:
    with pytest.raises(CtrainError, match="damaged"):
        network_job.render("#!/bin/bash\necho no step here\n")


def test_cli_flag_and_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["job", "render", "multiworker", "--nodes", "2", "--gpus-per-node", "4"]
    runner = CliRunner()
    flagged = runner.invoke(main, [*args, "--check-network", "--", "python", "train.py"])
    assert flagged.exit_code == 0, flagged.output
    assert flagged.output == (GOLDEN / "multiworker-2x4-check-network.sbatch").read_text()
    plain = runner.invoke(main, [*args, "--", "python", "train.py"])
    assert "network_check" not in plain.output
    monkeypatch.setenv("CTRAIN_CHECK_NETWORK", "true")
    from_env = runner.invoke(main, [*args, "--", "python", "train.py"])
    assert from_env.output == flagged.output
    shown = runner.invoke(main, ["job", "render", "--help"])
    assert "--check-network" in shown.output and "CTRAIN_CHECK_NETWORK" in shown.output


def test_a_failing_check_stops_the_job_before_training(tmp_path: Path) -> None:
    """The rendered script run by bash, its srun a stand-in: the check's step fails, the
    training step never starts."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for tool, code in (("srun", 'case "$*" in *doctor*) exit 1;; esac'), ("ctrain", "")):
        script = bin_dir / tool
        script.write_text(f'#!/bin/bash\necho "{tool} $*" >> {log}\n{code}\necho image.sif\n')
        script.chmod(0o755)
    request = JobRequest("multiworker", ("python", "t.py"), gpus_per_node=0, runtime="host",
                         check_network=True)  # fmt: skip
    job = tmp_path / "job.sbatch"
    job.write_text(jobs.render(request))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_ID": "5"}
    done = subprocess.run(["bash", str(job)], capture_output=True, text=True, env=env, timeout=30)
    assert done.returncode == 1
    assert "the network check failed" in done.stderr
    calls = log.read_text().splitlines()
    assert calls[-1].endswith("-- ctrain doctor --network")
    assert not any("python t.py" in call for call in calls)
