"""Thread, polling and allocator defaults from the allocation, as truth tables
(launch/tuning.py)."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctrain.cli import main
from ctrain.launch import start
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.plan import LaunchOptions, make_plan
from ctrain.launch.tuning import (
    KEEP_FREED,
    MALLOC,
    Cpus,
    Tuned,
    allocator,
    defaults,
    rank_threads,
    to_set,
    tune,
)
from ctrain.names import Mode
from ctrain.settings import resolve
from tests.support.environs import slurm_step

THREADS = ("OMP_NUM_THREADS", "TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS")
YIELD = "OMPI_MCA_mpi_yield_when_idle"


def shared(mask: int, ranks: int) -> str:
    return f"{mask} CPU(s) in the task's mask shared by {ranks} rank(s) on the node"


def bound(mask: int, how: str) -> str:
    return f"Slurm bound this task to {mask} CPU(s) ({how})"


BIND = "SLURM_CPU_BIND_TYPE"


@pytest.mark.parametrize(
    ("environ", "cpus_per_task", "cpus", "local_size", "expected"),
    [
        # Slurm's --cpus-per-task wins over any mask
        ({}, 4, Cpus(2, 2), 2, (4, "SLURM_CPUS_PER_TASK=4")),
        ({}, 1, None, 1, (1, "SLURM_CPUS_PER_TASK=1")),
        ({BIND: "cores"}, 3, Cpus(8, 64), 2, (3, "SLURM_CPUS_PER_TASK=3")),
        # nothing known
        ({}, None, None, 2, None),
        ({}, 0, None, 1, None),
        # an unbound mask is shared by the node's ranks
        ({}, None, Cpus(2, 2), 2, (1, shared(2, 2))),
        ({}, None, Cpus(2, 2), 1, (2, shared(2, 1))),
        ({}, None, Cpus(16, 64), 4, (4, shared(16, 4))),
        ({}, None, Cpus(7, 8), 2, (3, shared(7, 2))),
        ({}, None, Cpus(2, 2), 3, (1, shared(2, 3))),
        ({}, None, Cpus(2, 2), 0, (2, shared(2, 1))),
        ({BIND: "none"}, None, Cpus(4, 4), 2, (2, shared(4, 2))),
        ({BIND: " none, "}, None, Cpus(4, 4), 4, (1, shared(4, 4))),
        ({BIND: ""}, None, Cpus(4, 4), 1, (4, shared(4, 1))),
        # a task Slurm bound has its mask to itself
        ({BIND: "mask_cpu:"}, None, Cpus(3, 64), 4, (3, bound(3, "mask_cpu:"))),
        ({BIND: "cores,"}, None, Cpus(1, 2), 2, (1, bound(1, "cores"))),
    ],
)
def test_rank_threads(
    environ: dict[str, str],
    cpus_per_task: int | None,
    cpus: Cpus | None,
    local_size: int,
    expected: tuple[int, str] | None,
) -> None:
    assert rank_threads(environ, cpus_per_task, cpus, local_size) == expected


def test_thread_defaults_in_full() -> None:
    found = defaults({}, Mode.MULTIWORKER, 2, 4, None)
    assert found == {
        "TF_NUM_INTRAOP_THREADS": (
            "4",
            "one TensorFlow op thread per CPU of the rank: SLURM_CPUS_PER_TASK=4",
        ),
        "TF_NUM_INTEROP_THREADS": ("2", "at most 2 ops side by side, within the rank's 4 CPU(s)"),
        "OMP_NUM_THREADS": ("4", "OpenMP/BLAS threads as TensorFlow's: SLURM_CPUS_PER_TASK=4"),
    }


@pytest.mark.parametrize(("threads", "interop"), [(1, "1"), (2, "2"), (3, "2"), (64, "2")])
def test_interop_threads_are_at_most_two(threads: int, interop: str) -> None:
    found = defaults({}, Mode.SINGLE, 1, threads, None)
    assert found["TF_NUM_INTEROP_THREADS"][0] == interop
    assert found["TF_NUM_INTRAOP_THREADS"][0] == found["OMP_NUM_THREADS"][0] == str(threads)


# (mode, ranks on the node, CPUs per task, node CPUs) -> does MPI yield when idle?
YIELD_TABLE = {
    (Mode.HOROVOD, 2, 1, 2): True,  # this machine: 2 ranks x 1 thread on 2 CPUs
    (Mode.HOROVOD, 2, 1, 3): False,  # a CPU left for the progress engine
    (Mode.HOROVOD, 1, 2, 2): True,
    (Mode.HOROVOD, 4, 16, 64): True,  # exactly full
    (Mode.HOROVOD, 4, 15, 64): False,
    (Mode.HOROVOD, 8, 16, 64): True,  # oversubscribed
    (Mode.MULTIWORKER, 2, 1, 2): False,  # no MPI
    (Mode.SINGLE, 1, 2, 2): False,
    (Mode.MIRRORED, 1, 2, 2): False,
}


@pytest.mark.parametrize(("case", "expected"), YIELD_TABLE.items())
def test_mpi_yields_when_ranks_times_threads_fill_the_node(
    case: tuple[Mode, int, int, int], expected: bool
) -> None:
    mode, ranks, threads, node = case
    found = defaults({}, mode, ranks, threads, Cpus(node, node))
    assert (YIELD in found) is expected
    if expected:
        assert found[YIELD] == (
            "1",
            f"{ranks} rank(s) x {threads} thread(s) fill the node's {node} CPUs: idle MPI "
            "waits yield the CPU instead of spinning",
        )


@pytest.mark.parametrize(
    ("mine", "expected"),
    # not a positive number: ctrain's 2 threads count
    [("1", False), ("2", True), (" 2 ", True), ("0", True), ("x", True), ("", True)],
)
def test_the_users_op_threads_decide_the_yield(mine: str, expected: bool) -> None:
    """One rank on 2 CPUs: ctrain would give it 2 threads (a full node); 1 of the user's
    leaves a CPU free."""
    found = defaults({"TF_NUM_INTRAOP_THREADS": mine}, Mode.HOROVOD, 1, None, Cpus(2, 2))
    assert (YIELD in found) is expected
    if expected:
        assert found[YIELD][1].startswith("1 rank(s) x 2 thread(s) fill")


def test_no_yield_without_the_node_size() -> None:
    assert YIELD not in defaults({}, Mode.HOROVOD, 64, 1, None)
    assert defaults({}, Mode.HOROVOD, 2, None, None) == {}


@pytest.mark.parametrize(("gpus", "expected"), [(0, True), (1, False), (8, False)])
def test_malloc_keeps_what_it_frees_only_where_the_cpu_computes(gpus: int, expected: bool) -> None:
    assert allocator(gpus) == (
        {MALLOC: (KEEP_FREED, "no GPU: the CPU's kernels reuse freed memory, no page faults")}
        if expected
        else {}
    )
    assert KEEP_FREED == "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"


ENVIRONS = (
    {},
    {"OMP_NUM_THREADS": "7"},
    {"OMPI_MCA_mpi_yield_when_idle": "0"},
    {MALLOC: "glibc.malloc.arena_max=2"},
)


@pytest.mark.parametrize(("environ", "choice"), list(itertools.product(ENVIRONS, ("auto", "off"))))
def test_what_the_user_set_is_kept_and_off_sets_nothing(
    environ: dict[str, str], choice: str
) -> None:
    tuned = tune(environ, choice, Mode.HOROVOD, 2, None, Cpus(2, 2), 0)
    if choice == "off":
        assert tuned == ()
        return
    assert [t.name for t in tuned] == sorted([*THREADS, YIELD, MALLOC])
    found = defaults(environ, Mode.HOROVOD, 2, None, Cpus(2, 2)) | allocator(0)
    for t in tuned:
        assert t.kept is (t.name in environ)
        mine = (environ[t.name], "kept (set by you)") if t.kept else found[t.name]
        assert (t.value, t.reason) == mine
    assert set(to_set(tuned)) == {*THREADS, YIELD, MALLOC} - set(environ)


def test_a_rank_with_a_gpu_keeps_mallocs_own_ways() -> None:
    tuned = tune({}, "auto", Mode.HOROVOD, 2, None, Cpus(2, 2), 1)
    assert [t.name for t in tuned] == sorted([*THREADS, YIELD])


def test_to_set_leaves_out_what_is_kept() -> None:
    tuned = (Tuned("A", "1", "why"), Tuned("B", "2", "kept (set by you)", kept=True))
    assert to_set(tuned) == {"A": "1"}
    assert Tuned("C", "3", "why").kept is False


HOROVOD2 = slurm_step(1, 2, job="9", SLURM_JOB_NODELIST=None, PMIX_RANK="1")


def test_the_plan_carries_the_tuning_to_the_child_and_explain() -> None:
    environ = {**HOROVOD2, "TF_NUM_INTEROP_THREADS": "4"}
    plan = make_plan(
        JobEnv.from_environ(environ, "vm"), LaunchOptions(mode="horovod"), environ, (), False,
        Cpus(2, 2),
    )  # fmt: skip
    assert plan.env_set["TF_NUM_INTRAOP_THREADS"] == plan.env_set["OMP_NUM_THREADS"] == "1"
    assert plan.env_set[YIELD] == "1"
    assert "TF_NUM_INTEROP_THREADS" not in plan.env_set
    explained = plan.explain()["tuning"]
    assert {"name": "TF_NUM_INTEROP_THREADS", "value": "4", "reason": "kept (set by you)",
            "kept": True} in explained  # fmt: skip
    assert [t["name"] for t in explained] == sorted([*THREADS, YIELD, MALLOC])
    assert plan.env_set[MALLOC] == KEEP_FREED  # no GPU here


def test_tune_off_in_the_plan() -> None:
    plan = make_plan(
        JobEnv.from_environ(HOROVOD2, "vm"), LaunchOptions(mode="horovod", tune="off"),
        HOROVOD2, (), False, Cpus(2, 2),
    )  # fmt: skip
    assert plan.tuned == () and plan.explain()["tuning"] == []
    assert not {*THREADS, YIELD, MALLOC} & set(plan.env_set)


def test_explain_prints_each_tuned_variable_with_its_reason() -> None:
    environ = {**HOROVOD2, "OMP_NUM_THREADS": "3"}
    plan = make_plan(
        JobEnv.from_environ(environ, "vm"), LaunchOptions(mode="horovod"), environ, (), False,
        Cpus(2, 2),
    )  # fmt: skip
    lines = start.explain(plan, as_json=False).splitlines()
    assert "  keep  OMP_NUM_THREADS=3  # kept (set by you)" in lines
    assert (
        "  tune  TF_NUM_INTRAOP_THREADS=1  # one TensorFlow op thread per CPU of the rank: "
        + shared(2, 2)
    ) in lines
    assert not [line for line in lines if line.startswith("  set   TF_NUM_INTRAOP_THREADS")]
    assert [line.split()[1] for line in lines if line.startswith(("  tune", "  keep"))] == [
        f"{t.name}={t.value}" for t in plan.tuned
    ]
    assert {
        "name": "OMP_NUM_THREADS", "value": "3", "reason": "kept (set by you)", "kept": True,
    } in json.loads(start.explain(plan, as_json=True))["tuning"]  # fmt: skip


def test_this_process_cpus_are_its_mask_and_the_node() -> None:
    cpus = start.this_cpus()
    assert cpus.node == os.cpu_count()
    assert cpus.mask == len(os.sched_getaffinity(0)) <= cpus.node


def test_launch_tune_off_on_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*THREADS, YIELD, MALLOC, "CTRAIN_TUNE", "SLURM_CPUS_PER_TASK"):
        monkeypatch.delenv(name, raising=False)
    on = json.loads(CliRunner().invoke(main, ["launch", "--explain", "--json"]).output)
    # and GLIBC_TUNABLES where this machine has no GPU (tested on a plan above)
    assert [t["name"] for t in on["tuning"] if t["name"] != MALLOC] == sorted(THREADS)
    off = CliRunner().invoke(main, ["launch", "--tune", "off", "--explain", "--json"])
    assert json.loads(off.output)["tuning"] == []
    monkeypatch.setenv("CTRAIN_TUNE", "off")
    by_env = json.loads(CliRunner().invoke(main, ["launch", "--explain", "--json"]).output)
    assert by_env["tuning"] == [] and not set(THREADS) & set(by_env["env"]["set"])


def test_the_tune_setting_reaches_the_launch_options(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    off = resolve({}, {**home, "CTRAIN_TUNE": "off"}, tmp_path)
    assert LaunchOptions.from_settings(off).tune == "off"
    assert LaunchOptions.from_settings(resolve({}, home, tmp_path)).tune == "auto"
