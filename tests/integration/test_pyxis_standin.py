"""A pyxis job for real on the local Slurm, through the pyxis and enroot stand-ins
(tests/support/fake_pyxis.py): the multiworker script rendered with ``--runtime pyxis`` for a
registry image imports it once in the batch step (``ctrain resolve``: enroot import from the local
registry into ctrain's cache), then runs 2 ranks in one step whose srun carries pyxis' options
with that squashfs file and ctrain's launcher carried in read-only (``ctrain carried``); the
stand-in reads them as pyxis does and runs each task with the environment, mounts and working
directory pyxis gives it. Training ends with the same weights on both ranks.

The stand-ins check the image is a real squashfs file, and give each task the image
environment FAKE_PYXIS_IMAGE_ENV models (this venv first on PATH, this checkout on PYTHONPATH),
as enroot would from inside the image. This is pyxis and enroot as documented, not themselves
(README: "tested by stand-in, not for real").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ctrain import planner
from ctrain.container import carry
from ctrain.images import pull
from ctrain.images.stores.base import PullAsk
from ctrain.slurm.pyxis_job import IMAGE_PYTHON
from tests.support import fake_pyxis
from tests.support.helpers import REGISTRY, SRC, need, registry_up
from tests.support.real_runs import BIN, clean_env
from tests.support.registry_push import BUSYBOX, push_tiny
from tests.support.slurm_jobs import RESUMABLE, final_weights, lines, log, render, submit, wait_done
from tests.support.standin.remote import DEFAULT_PATH

pytestmark = [pytest.mark.slurm, pytest.mark.tensorflow, pytest.mark.timeout(300)]
EPOCHS = 2
CARRIED = planner.carried_launcher()  # the batch step's ctrain is this checkout's too


@pytest.fixture
def squashfs(tmp_path: Path) -> Path:
    need(shutil.which("mksquashfs") is not None, "mksquashfs missing (squashfs-tools, make system)")
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    image = tmp_path / "ctrain.sqsh"
    done = subprocess.run(
        ["mksquashfs", str(root), str(image), "-quiet", "-noappend"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return image


@pytest.fixture
def registry_image() -> str:
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    need(BUSYBOX.is_file(), f"{BUSYBOX} missing (make system installs busybox-static)")
    need(shutil.which("mksquashfs") is not None, "mksquashfs missing (squashfs-tools)")
    tag = f"job-{os.getpid()}-{int(time.time())}"
    push_tiny("ctrain-test/enroot-tiny", tag)
    return f"docker://{REGISTRY}/ctrain-test/enroot-tiny:{tag}"


def test_multiworker_job_through_pyxis(
    tmp_path: Path, registry_image: str, jobs_to_cancel: list[str]
) -> None:
    bin_dir = tmp_path / "bin"
    fake_pyxis.install(bin_dir)
    fake_pyxis.install_enroot(bin_dir)
    out, calls, imports = tmp_path / "out", tmp_path / "pyxis.jsonl", tmp_path / "enroot.jsonl"
    command = ["python", str(RESUMABLE), str(out), str(EPOCHS)]
    script = render("multiworker", command, runtime="pyxis", image=registry_image)
    boot = " ".join(carry.command(['"$@"'], IMAGE_PYTHON))
    assert f'srun --kill-on-bad-exit=1 "${{container_options[@]}}" {boot}' in script
    image_env = {"PATH": f"{BIN}:{DEFAULT_PATH}", "PYTHONPATH": SRC}
    job = submit(
        script,
        tmp_path,
        jobs_to_cancel,
        PATH=f"{bin_dir}:{BIN}:{DEFAULT_PATH}",
        PYTHONPATH=SRC,
        LANG="C.UTF-8",  # pyxis drops the host's locale
        FAKE_PYXIS_IMAGE_ENV=json.dumps(image_env),
        FAKE_PYXIS_LOG=str(calls),
        CTRAIN_CACHE_DIR=str(tmp_path / "cache"),
        CTRAIN_MIN_FREE_GB="1",
        ENROOT_ALLOW_HTTP="yes",  # the local registry speaks HTTP
        FAKE_ENROOT_LOG=str(imports),
    )
    record = wait_done(job, tmp_path, timeout=240)
    assert record["JobState"] == "COMPLETED", log(tmp_path)

    runs = lines(out / "runs.jsonl")
    assert sorted(r["rank"] for r in runs) == [0, 1]  # type: ignore[type-var]
    assert all(r["mode"] == "multiworker" and r["end"] == "done" for r in runs)
    first, second = final_weights(out, 2)
    assert first == second
    assert len(fake_pyxis.calls(imports)) == 1  # once, in the batch step, not once per node
    sqsh = pull.plan(
        PullAsk(
            ref=registry_image, runtime="pyxis", program="enroot", cache_root=tmp_path / "cache"
        )
    ).target
    tasks = fake_pyxis.calls(calls)
    assert sorted(str(t["task"]) for t in tasks) == ["0", "1"]
    for task in tasks:
        assert task["image"] == str(sqsh)
        assert task["workdir"] == str(tmp_path)
        mounts = task["mounts"]
        assert isinstance(mounts, list) and mounts[0]["src"] == mounts[0]["dst"] == str(tmp_path)
        env = task["env"]
        assert isinstance(env, dict)
        assert env["CTRAIN_MODE"] == "multiworker" and env["PYTHONNOUSERSITE"] == "1"
        assert env["PATH"] == image_env["PATH"] and "LANG" not in env
        carried = [m for m in mounts if str(m["dst"]).startswith(str(carry.ROOT))]
        assert {m["dst"] for m in carried} == {str(b.dst) for b in carry.binds(CARRIED)}
        assert all(m["flags"] == ["x-create=auto", "rbind", "ro"] for m in carried), carried
        assert task["command"] == list(carry.command(command, ""))  # no CTRAIN_IMAGE_PYTHON


def test_exec_starts_one_step_through_pyxis(tmp_path: Path, squashfs: Path) -> None:
    """``ctrain exec --runtime pyxis`` outside an allocation: srun makes one (on the debug
    partition, SLURM_PARTITION) and runs the step; the value asked with --env arrives as given
    over the image's, in ctrain's directory, with the command's exit status."""
    bin_dir = tmp_path / "bin"
    fake_pyxis.install(bin_dir)
    value = "a,b $HOME `id` 'q'"
    probe = "import os, sys; print(repr(os.environ['X']), os.getcwd()); sys.exit(3)"
    argv = [str(BIN / "ctrain"), "exec", "--runtime", "pyxis", "--no-launch", "--env", f"X={value}",
            str(squashfs), "--", "python", "-c", probe]  # fmt: skip
    image_env = {"PATH": f"{BIN}:{DEFAULT_PATH}", "X": "the image's"}
    env = clean_env(
        PATH=f"{bin_dir}:{BIN}:{DEFAULT_PATH}",
        PYTHONPATH=SRC,
        SLURM_PARTITION="debug",
        FAKE_PYXIS_IMAGE_ENV=json.dumps(image_env),
    )
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert done.stdout.strip() == f"{value!r} {tmp_path}"
