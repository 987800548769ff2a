"""The pyxis job scripts' own logic, run by bash with a fake srun that records its argv: the
step is srun with pyxis' options around the carried launcher's boot script, built from the
job's directory, TMPDIR and ``ctrain carried``; a directory pyxis cannot mount stops the job
before any step."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ctrain.container import carry
from ctrain.slurm import jobs
from ctrain.slurm.request import JobRequest
from tests.support.fake_job_programs import env

COMMAND = ("python", "train.py", "--epochs", "3")
CARRIED = "/site/ctrain:/opt/ctrain-carried/api/ctrain:ro"  # what the fake `ctrain carried` says


def run(path: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The script run in its own directory, as sbatch runs it in the submission directory."""
    argv = ["bash", str(path)]
    return subprocess.run(
        argv, env=environ, cwd=path.parent, capture_output=True, text=True, timeout=60
    )


def script(fakes: Path, mode: str) -> Path:
    request = JobRequest(mode, COMMAND, nodes=1, gpus_per_node=0, runtime="pyxis")
    path = fakes / f"{mode}.sbatch"
    path.write_text(jobs.render(request))
    return path


@pytest.mark.parametrize("mode", ["single", "mirrored", "multiworker", "horovod-srun"])
def test_the_step_is_srun_with_pyxis_options(fakes: Path, mode: str) -> None:
    tmpdir = fakes / "job tmp"
    tmpdir.mkdir()
    environ = env(fakes, FAKE_MODE="exit:0", CTRAIN_IMAGE="img", CTRAIN_RUNTIME="docker")
    done = run(script(fakes, mode), {**environ, "TMPDIR": str(tmpdir)})
    assert done.returncode == 0, done.stderr
    assert (fakes / "ctrain").read_text().splitlines() == ["resolve", "img", "carried"]
    argv = (fakes / "argv").read_text().splitlines()
    launcher = ["srun", "--mpi=pmix"] if mode == "horovod-srun" else ["srun"]
    assert argv == [
        *launcher,
        "--kill-on-bad-exit=1",
        "--container-image=/pulled/img",
        f"--container-mounts={fakes}:{fakes},{tmpdir}:{tmpdir},{CARRIED}",
        f"--container-workdir={fakes}",
        "--container-env=CTRAIN_MODE,CTRAIN_RUNTIME,CUDA_VISIBLE_DEVICES,"
        "NVIDIA_VISIBLE_DEVICES,PYTHONNOUSERSITE,TMPDIR",
        "--no-container-mount-home",
        *carry.command(COMMAND, ""),  # the job's CTRAIN_IMAGE_PYTHON: unset
    ]


def test_the_jobs_image_python_names_the_launchers_interpreter(fakes: Path) -> None:
    environ = env(fakes, FAKE_MODE="exit:0", CTRAIN_IMAGE_PYTHON="/ext3/env/bin/python")
    done = run(script(fakes, "single"), {**environ, "TMPDIR": "/tmp"})
    assert done.returncode == 0, done.stderr
    argv = (fakes / "argv").read_text().splitlines()
    launcher = carry.command(COMMAND, "/ext3/env/bin/python")
    assert argv[-len(launcher) :] == list(launcher)


def test_no_tmpdir_mount_without_a_job_tmpdir(fakes: Path) -> None:
    done = run(script(fakes, "single"), {**env(fakes, FAKE_MODE="exit:0"), "TMPDIR": "/tmp"})
    assert done.returncode == 0, done.stderr
    mounts = f"--container-mounts={fakes}:{fakes},{CARRIED}"
    assert mounts in (fakes / "argv").read_text().splitlines()


def test_a_path_pyxis_cannot_mount_stops_the_job(fakes: Path) -> None:
    tmpdir = fakes / "a,b"
    tmpdir.mkdir()
    done = run(script(fakes, "single"), {**env(fakes, FAKE_MODE="exit:0"), "TMPDIR": str(tmpdir)})
    assert done.returncode == 2
    assert "pyxis cannot mount" in done.stderr
    assert not (fakes / "argv").exists()  # no step started
