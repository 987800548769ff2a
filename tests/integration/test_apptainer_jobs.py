"""Whole jobs under the local Slurm through the Apptainer stand-in (tests/fake_apptainer.py), which
runs each command for real on this host: the job scripts with CTRAIN_RUNTIME=apptainer and a
remote image in the local registry (127.0.0.1:5000). The image is pulled once, in the batch step,
through ctrain's pull (one download in the stand-in's log for all ranks); the step itself is
offline (FAKE_APPTAINER_OFFLINE=1 for srun only, through srun's SLURM_EXPORT_ENV) and each rank
runs the local SIF file; training ends with the same weights on both ranks.

Also: an environment value with $HOME, backticks, quotes, a comma, spaces, a newline and a trailing
backslash reaches the command byte for byte through ``ctrain exec`` on apptainer and singularity.

The image is a `docker import` of an empty root whose OCI Env puts this venv first on PATH (and
this checkout on PYTHONPATH): the stand-in runs commands on the host with the image's
environment, as Apptainer would inside the image.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain.images import pull, sif
from tests import fake_apptainer
from tests.helpers import REGISTRY, ctrain_env, need, registry_up

from .jobs import BIN
from .test_jobs_real import RESUMABLE, final_weights, job_env, lines, log, render, wait_done

TIMEOUT = 180
THREADS = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
pytestmark = [pytest.mark.timeout(900)]


def empty_root() -> bytes:
    """A root filesystem with one empty directory (the stand-in never looks inside)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("tmp")
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777, 0
        tar.addfile(info)
    return buffer.getvalue()


def image_env() -> dict[str, str]:
    """What the image's OCI Env holds: this venv and checkout, one thread per process."""
    return {
        **fake_apptainer.ctrain_image_env(),
        "TF_CPP_MIN_LOG_LEVEL": "2",
        **dict.fromkeys(THREADS, "1"),
    }


@pytest.fixture(scope="module")
def remote_image() -> Iterator[str]:
    """``docker://127.0.0.1:5000/...`` of a tiny image pushed for this run."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    tag = f"{REGISTRY}/ctrain-test/host-venv:{os.getpid()}-{int(time.time())}"
    changes = [a for k, v in image_env().items() for a in ("--change", f"ENV {k}={v}")]
    steps: list[tuple[list[str], bytes | None]] = [
        (["docker", "import", *changes, "-", tag], empty_root()),
        (["docker", "push", tag], None),
    ]
    for argv, data in steps:
        done = subprocess.run(argv, input=data, capture_output=True, timeout=TIMEOUT)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
    subprocess.run(["docker", "image", "rm", tag], capture_output=True, timeout=TIMEOUT)
    yield f"docker://{tag}"


class StandIn:
    """The stand-in apptainer first on PATH, its log, and ctrain's cache, under ``root``."""

    def __init__(self, root: Path, name: str = "apptainer") -> None:
        self.root = root
        self.bin = root / "bin"
        self.log = root / "apptainer-calls.jsonl"
        self.cache = root / "cache"
        fake_apptainer.install(self.bin, name)

    def env(self, **extra: str) -> dict[str, str]:
        return ctrain_env(
            job_env(
                PATH=f"{self.bin}:{BIN}:/usr/bin:/bin",
                FAKE_APPTAINER_LOG=str(self.log),
                CTRAIN_CACHE_DIR=str(self.cache),
                CTRAIN_MIN_FREE_GB="1",
                **extra,
            )
        )

    def calls(self) -> list[dict[str, object]]:
        return fake_apptainer.calls(self.log)

    def downloads(self) -> list[dict[str, object]]:
        return fake_apptainer.downloads(self.log)

    def images(self) -> list[object]:
        found = [c["container"] for c in self.calls() if "container" in c]
        return [c["image"] for c in found if isinstance(c, dict)]


OFFLINE_STEP = "ALL,FAKE_APPTAINER_OFFLINE=1"  # srun's --export: the step's, not the batch's


def sbatch(script: Path, env: dict[str, str], cwd: Path, submitted: list[str]) -> str:
    done = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    submitted.append(job)
    return job


def run_job(mode: str, ranks: int, image: str, root: Path, submitted: list[str]) -> StandIn:
    """``mode``'s job script on apptainer with the remote ``image``, the step offline."""
    standin = StandIn(root)
    out = root / "out"
    script = root / "job.sbatch"
    command = ["python", str(RESUMABLE), str(out), "2"]
    script.write_text(render(mode, command, runtime="apptainer", image=image, job_name=mode))
    job = sbatch(script, standin.env(SLURM_EXPORT_ENV=OFFLINE_STEP), root, submitted)
    record = wait_done(job, root)
    assert record["JobState"] == "COMPLETED", log(root)
    assert record["ExitCode"] == "0:0", log(root)
    runs = lines(out / "runs.jsonl")
    assert sorted(r["rank"] for r in runs) == list(range(ranks))  # type: ignore[type-var]
    expected_mode = "horovod" if mode.startswith("horovod") else mode
    assert all(r["end"] == "done" and r["mode"] == expected_mode for r in runs), runs
    first, *others = final_weights(out, ranks)
    assert all(w == first for w in others)
    return standin


CASES = [
    pytest.param("multiworker", id="multiworker"),
    pytest.param("horovod-srun", id="horovod-srun", marks=pytest.mark.horovod),
]


@pytest.mark.slurm
@pytest.mark.docker
@pytest.mark.tensorflow
@pytest.mark.parametrize("mode", CASES)
def test_job_pulls_once_and_every_rank_runs_the_local_file_offline(
    mode: str, remote_image: str, tmp_path: Path, jobs_to_cancel: list[str]
) -> None:
    standin = run_job(mode, 2, remote_image, tmp_path, jobs_to_cancel)
    downloads = standin.downloads()
    assert [d["ref"] for d in downloads] == [remote_image], log(tmp_path)
    pulls = [c for c in standin.calls() if c.get("argv", [""])[0] == "pull"]  # type: ignore[index]
    assert len(pulls) == 1  # the batch step's, through ctrain's pull
    local = str(standin.cache / sif.IMAGES_DIR / pull.image_filename(remote_image))
    assert standin.images() == [local, local], standin.calls()  # one exec per rank


@pytest.mark.slurm
@pytest.mark.docker
def test_the_step_is_offline_and_the_batch_step_is_not(
    remote_image: str, tmp_path: Path, jobs_to_cancel: list[str]
) -> None:
    """The control for the test above: with SLURM_EXPORT_ENV as it sets it, the stand-in
    itself reaches the registry from the batch step and refuses the remote image in the step."""
    standin = StandIn(tmp_path)
    script = tmp_path / "probe.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --ntasks=1\n#SBATCH --time=2\n#SBATCH --output=probe.out\n"
        f"apptainer exec {remote_image} true && echo batch online\n"
        f"srun apptainer exec {remote_image} true || echo step offline\n"
    )
    # apptainer itself caches under APPTAINER_CACHEDIR, else ~/.apptainer: keep it in tmp_path.
    env = standin.env(SLURM_EXPORT_ENV=OFFLINE_STEP, APPTAINER_CACHEDIR=str(tmp_path / "ac"))
    job = sbatch(script, env, tmp_path, jobs_to_cancel)
    assert wait_done(job, tmp_path)["JobState"] == "COMPLETED", log(tmp_path)
    assert list((tmp_path / "ac" / "cache").iterdir())  # the batch step's pull went there
    text = log(tmp_path)
    assert "batch online\n" in text and "no route to host" in text and "step offline\n" in text


TRICKY = "a, b $HOME `echo hi` \"double\" 'single'  two  spaces\nsecond line\\"


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_an_env_value_reaches_the_command_byte_for_byte(runtime: str, tmp_path: Path) -> None:
    standin = StandIn(tmp_path, runtime)
    image = tmp_path / "img.sif"
    fake_apptainer.make_sif(image, image_env())
    show = "import os, sys; sys.stdout.buffer.write(os.environb[b'TRICKY'])"
    done = subprocess.run(
        [
            str(BIN / "ctrain"),
            "exec",
            "--runtime",
            runtime,
            "--no-launch",
            "--env",
            f"TRICKY={TRICKY}",
            str(image),
            "--",
            "python",
            "-c",
            show,
        ],
        env=standin.env(),
        capture_output=True,
        timeout=TIMEOUT,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert done.stdout == TRICKY.encode()
