"""The Apptainer stand-in (tests/fake_apptainer.py) under the real Slurm: every rank of an srun
step runs its command through it, and the offline compute node of issue 11 item 3 behaves as
/work/shared/apptainer-facts.md says (exec, remote IMAGE row: the manifest is asked for before
the cache, so a warm cache does not help; a local SIF needs no network)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import fake_apptainer

from .jobs import clean_env, run

pytestmark = pytest.mark.slurm
REMOTE = "docker://registry.example/team/train:1"


def stand_in(tmp_path: Path, **extra: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    fake_apptainer.install(bin_dir)
    env = clean_env(FAKE_APPTAINER_LOG=str(tmp_path / "calls.jsonl"), **extra)
    return {**env, "PATH": f"{bin_dir}:{env['PATH']}", "HOME": str(tmp_path)}


def srun(*args: str) -> list[str]:
    return ["srun", "-n", "2", "-t", "2", "--kill-on-bad-exit=0", *args]


def test_every_rank_runs_its_command_through_the_stand_in(tmp_path: Path) -> None:
    env = stand_in(tmp_path, APPTAINERENV_NOTE="$SLURM_PROCID")  # evaluated inside, per rank
    image = fake_apptainer.make_sif(tmp_path / "img.sif", {"PATH": "/usr/bin:/bin"})
    script = 'echo "$SLURM_PROCID:$NOTE"'
    done = run(srun("apptainer", "exec", str(image), "sh", "-c", script), env, timeout=120)
    assert sorted(done.stdout.split()) == ["0:0", "1:1"]
    execs = [c for c in fake_apptainer.calls(tmp_path / "calls.jsonl") if "container" in c]
    assert len({c["pid"] for c in execs}) == 2


def test_an_offline_step_needs_a_local_image(tmp_path: Path) -> None:
    env = stand_in(tmp_path)
    image = tmp_path / "img.sif"
    run(["apptainer", "pull", str(image), REMOTE], env, timeout=120)  # the batch step, online
    offline = {**env, "FAKE_APPTAINER_OFFLINE": "1"}
    failed = subprocess.run(
        srun("apptainer", "exec", REMOTE, "true"),
        env=offline,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert failed.returncode != 0 and failed.stderr.count("failed to get checksum") == 2
    run(srun("apptainer", "exec", str(image), "true"), offline, timeout=120)
    downloads = fake_apptainer.downloads(tmp_path / "calls.jsonl")
    assert [d["ref"] for d in downloads] == [REMOTE]  # one download, by the batch step
