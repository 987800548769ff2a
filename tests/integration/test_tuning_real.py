"""ctrain launch's thread, polling and allocator defaults under the real Slurm: what each rank
of a step gets from its CPU mask and from --cpus-per-task, and what reaches the training
command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN
from tests.support.real_runs import clean_env, run

SRUN = ["srun", "-t", "5", "--kill-on-bad-exit=1"]
THREADS = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
YIELD = "OMPI_MCA_mpi_yield_when_idle"


def untuned_env(**extra: str) -> dict[str, str]:
    """The tests' environment without the thread counts it sets for every other test."""
    return {**{k: v for k, v in clean_env().items() if k not in THREADS}, **extra}


def explained(tmp_path: Path, *srun: str) -> list[dict[str, object]]:
    argv = [*SRUN, *srun, "--output", f"{tmp_path}/plan-%t.json", CTRAIN, "launch"]
    run([*argv, "--mode", "horovod", "--explain", "--json"], untuned_env(), timeout=120)
    return [json.loads(path.read_text()) for path in sorted(tmp_path.glob("plan-*.json"))]


def tuning(plan: dict[str, object]) -> dict[str, str]:
    found = plan["tuning"]
    assert isinstance(found, list)
    return {t["name"]: t["value"] for t in found if not t["kept"]}


@pytest.mark.slurm
@pytest.mark.horovod
def test_two_ranks_share_the_node_and_mpi_yields(tmp_path: Path) -> None:
    plans = explained(tmp_path, "-n", "2", "--mpi=pmix")
    cpus = len(os.sched_getaffinity(0))  # the step's tasks are not bound here (task/none)
    each = max(1, cpus // 2)
    for plan in plans:
        tuned = tuning(plan)
        assert tuned["TF_NUM_INTRAOP_THREADS"] == tuned["OMP_NUM_THREADS"] == str(each)
        assert tuned["TF_NUM_INTEROP_THREADS"] == str(min(2, each))
        assert (tuned.get(YIELD) == "1") is (2 * each >= (os.cpu_count() or 1))
    assert len(plans) == 2


@pytest.mark.slurm
@pytest.mark.horovod
def test_cpus_per_task_decides_and_what_the_user_set_is_kept(tmp_path: Path) -> None:
    (plan,) = explained(tmp_path, "-n", "1", "-c", "1", "--mpi=pmix")
    tuned = tuning(plan)
    assert tuned["TF_NUM_INTRAOP_THREADS"] == tuned["TF_NUM_INTEROP_THREADS"] == "1"
    assert YIELD not in tuned or (os.cpu_count() or 1) <= 1  # 1 rank x 1 thread
    probe = "import os; print(os.environ['TF_NUM_INTRAOP_THREADS'], os.environ['OMP_NUM_THREADS'])"
    done = run(
        [*SRUN, "-n", "1", "-c", "1", CTRAIN, "launch", "--quiet", "--", "python", "-c", probe],
        untuned_env(OMP_NUM_THREADS="5"),
        timeout=120,
    )
    assert done.stdout.split() == ["1", "5"]


@pytest.mark.slurm
def test_a_rank_without_a_gpu_gets_mallocs_tunables_and_glibc_takes_them() -> None:
    """The rank's glibc reads GLIBC_TUNABLES when the command starts: its dynamic loader lists
    the trim threshold ctrain chose (mmap_max=0 reads as unset there, so it cannot be told)."""
    command = [CTRAIN, "launch", "--quiet", "--", "sh", "-c"]
    show = 'echo "$GLIBC_TUNABLES"; /lib64/ld-linux-x86-64.so.2 --list-tunables'
    done = run([*SRUN, "-n", "1", *command, show], untuned_env(), timeout=120)
    said = done.stdout.splitlines()
    assert said[0] == "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
    assert "glibc.malloc.trim_threshold: 0x40000000 (min: 0x0, max: 0xffffffffffffffff)" in said
    off = run([*SRUN, "-n", "1", *command, show], untuned_env(CTRAIN_TUNE="off"), timeout=120)
    assert off.stdout.splitlines()[0] == ""
    assert "glibc.malloc.trim_threshold: 0x0 (min: 0x0, max: 0xffffffffffffffff)" in off.stdout
