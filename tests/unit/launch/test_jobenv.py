"""JobEnv read from realistic Slurm / MPI / GPU environments, plus every refusal."""

from __future__ import annotations

import itertools

import pytest

from ctrain.errors import EnvironmentParseError
from ctrain.launch.jobenv import GpuEnv, JobEnv, MpiEnv, SlurmEnv
from tests.support.environs import slurm_step

JOB = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_CPUS_PER_TASK": "8"}

# `srun -n 2` on one node, as task 1.
SRUN_ONE_NODE = {
    **JOB,
    **slurm_step(
        1, 2, "gpu01", job="4242", SLURM_NODELIST="gpu01", SLURM_TASKS_PER_NODE="2",
        SLURM_NPROCS="2", SLURM_STEP_GPUS="0,1", CUDA_VISIBLE_DEVICES="0,1",
    ),
}  # fmt: skip

# `srun -N 2 -n 4` inside a 3-node allocation, as the last task.
SRUN_TWO_NODES = {
    **JOB,
    **slurm_step(
        3, 4, "gpu[01-02]", per_node="2(x2)", local=1, node=1, job="4242", step="3",
        SLURM_JOB_NODELIST="gpu[01-03]", SLURM_NODELIST="gpu[01-02]",
        SLURM_TASKS_PER_NODE="2(x2)", SLURM_RESTART_COUNT="2",
    ),
}  # fmt: skip

# An sbatch script with --ntasks=4 over two nodes: no step.
BATCH = {
    **JOB,
    "SLURM_JOB_NODELIST": "gpu[01-02]",
    "SLURM_NODELIST": "gpu[01-02]",
    "SLURM_TASKS_PER_NODE": "2(x2)",
    "SLURM_NTASKS": "4",
    "SLURM_NPROCS": "4",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "0",
    "SLURM_JOB_GPUS": "0,1",
}

EMPTY_SLURM = SlurmEnv(None, None, None, None, None, None, None, (), (), None)
NO_MPI = MpiEnv(None, None, None, None, None)


def test_outside_everything() -> None:
    env = JobEnv.from_environ({}, "laptop")
    assert env == JobEnv(EMPTY_SLURM, NO_MPI, GpuEnv(None, None), "laptop")
    assert not env.slurm.in_job
    assert not env.slurm.in_step


def test_srun_one_node() -> None:
    env = JobEnv.from_environ(SRUN_ONE_NODE, "gpu01")
    assert env.slurm == SlurmEnv("4242", "0", 1, 1, 0, 2, 2, ("gpu01",), (2,), 8)
    assert env.slurm.in_job and env.slurm.in_step
    assert env.mpi == NO_MPI
    assert env.gpus == GpuEnv(("0", "1"), "CUDA_VISIBLE_DEVICES")
    assert env.hostname == "gpu01"


def test_srun_two_nodes_uses_step_nodes() -> None:
    slurm = SlurmEnv.from_environ(SRUN_TWO_NODES)
    assert slurm == SlurmEnv("4242", "3", 3, 1, 1, 4, 4, ("gpu01", "gpu02"), (2, 2), 8)
    assert slurm.in_step


def test_batch_script_is_not_a_step() -> None:
    env = JobEnv.from_environ(BATCH, "gpu01")
    assert env.slurm == SlurmEnv("4242", None, 0, 0, 0, 4, None, ("gpu01", "gpu02"), (2, 2), 8)
    assert env.slurm.in_job and not env.slurm.in_step
    assert env.gpus == GpuEnv(("0", "1"), "SLURM_JOB_GPUS")


@pytest.mark.parametrize("rank", [0, 1])
def test_mpirun_inside_allocation(rank: int) -> None:
    ompi = {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        "PMIX_RANK": str(rank),
    }
    env = JobEnv.from_environ({**BATCH, **ompi}, "gpu01")
    assert env.slurm.procid == 0
    assert not env.slurm.in_step
    assert env.mpi == MpiEnv("openmpi", rank, 2, rank, 2)


def test_pmix_step() -> None:
    env = JobEnv.from_environ({**SRUN_ONE_NODE, "PMIX_RANK": "1", "PMIX_NAMESPACE": "x"}, "h")
    assert env.slurm.in_step
    assert env.mpi == MpiEnv("pmix", 1, None, None, None)


def test_horovodrun() -> None:
    horovod = {"HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_RANK": "1"}
    assert MpiEnv.from_environ({**horovod, "HOROVOD_LOCAL_SIZE": "2"}) == MpiEnv(
        "horovod", 3, 4, 1, 2
    )


def test_pmi() -> None:
    assert MpiEnv.from_environ({"PMI_RANK": "2", "PMI_SIZE": "3"}) == MpiEnv(
        "pmi", 2, 3, None, None
    )


RANK_VARS = {
    "openmpi": "OMPI_COMM_WORLD_RANK",
    "horovod": "HOROVOD_RANK",
    "pmix": "PMIX_RANK",
    "pmi": "PMI_RANK",
}


@pytest.mark.parametrize("present", list(itertools.product([False, True], repeat=4)))
def test_launcher_truth_table(present: tuple[bool, ...]) -> None:
    environ = {var: "0" for var, on in zip(RANK_VARS.values(), present, strict=True) if on}
    expected = next((name for name, on in zip(RANK_VARS, present, strict=True) if on), None)
    env = MpiEnv.from_environ(environ)
    assert env.launcher == expected
    assert env.rank == (None if expected is None else 0)


def test_blank_rank_does_not_select_launcher() -> None:
    assert MpiEnv.from_environ({"OMPI_COMM_WORLD_RANK": " ", "PMI_RANK": "1"}).launcher == "pmi"


@pytest.mark.parametrize(
    ("step_id", "num_tasks", "expected"),
    [
        (step, tasks, step in ("0", "7", "4294967280", "0+1") and tasks is not None)
        for step, tasks in itertools.product(
            [None, "0", "7", "4294967280", "0+1", "batch", "extern", "interactive"]
            + ["4294967291", "4294967292", "4294967294"],
            [None, "1"],
        )
    ],
)
def test_in_step_truth_table(step_id: str | None, num_tasks: str | None, expected: bool) -> None:
    environ = {"SLURM_JOB_ID": "1"}
    if step_id is not None:
        environ["SLURM_STEP_ID"] = step_id
    if num_tasks is not None:
        environ["SLURM_STEP_NUM_TASKS"] = num_tasks
    assert SlurmEnv.from_environ(environ).in_step is expected


@pytest.mark.parametrize(
    ("environ", "nodes", "tasks", "ntasks"),
    [
        ({"SLURM_NODELIST": "a[1-2]", "SLURM_TASKS_PER_NODE": "1(x2)"}, ("a1", "a2"), (1, 1), None),
        ({"SLURM_JOB_NODELIST": "j1", "SLURM_NODELIST": "x9"}, ("j1",), (), None),
        ({"SLURM_STEP_NODELIST": " s1 ", "SLURM_JOB_NODELIST": "j1"}, ("s1",), (), None),
        ({"SLURM_STEP_NODELIST": "", "SLURM_JOB_NODELIST": "j1"}, ("j1",), (), None),
        ({"SLURM_NPROCS": "3"}, (), (), 3),
        ({"SLURM_NTASKS": "2", "SLURM_NPROCS": "3"}, (), (), 2),
        ({"SLURM_NTASKS": "", "SLURM_NPROCS": "3"}, (), (), 3),
        ({"SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_TASKS_PER_NODE": "9"}, (), (3,), None),
    ],
)
def test_slurm_fallbacks(
    environ: dict[str, str], nodes: tuple[str, ...], tasks: tuple[int, ...], ntasks: int | None
) -> None:
    env = SlurmEnv.from_environ(environ)
    assert (env.nodes, env.tasks_per_node, env.ntasks) == (nodes, tasks, ntasks)


def test_whitespace_stripped_and_blank_is_unset() -> None:
    env = SlurmEnv.from_environ(
        {"SLURM_JOB_ID": " 7 ", "SLURM_PROCID": " 0\n", "SLURM_STEP_ID": ""}
    )
    assert (env.job_id, env.procid, env.step_id) == ("7", 0, None)


INT_VARS = [
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS",
    "SLURM_NPROCS",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_CPUS_PER_TASK",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "HOROVOD_LOCAL_SIZE",
    "PMIX_RANK",
    "PMI_RANK",
    "PMI_SIZE",
]


@pytest.mark.parametrize(
    ("name", "value"), list(itertools.product(INT_VARS, ["abc", "-1", "1.5", "2e3", "\u0663"]))
)
def test_integer_variables_refuse_non_integers(name: str, value: str) -> None:
    rank_var = {"OMPI": "OMPI_COMM_WORLD_RANK", "HORO": "HOROVOD_RANK", "PMI_": "PMI_RANK"}
    environ = {rank_var.get(name[:4], "PMIX_RANK"): "0", name: value}
    with pytest.raises(EnvironmentParseError) as caught:
        JobEnv.from_environ(environ, "h")
    assert f"{name}={value!r}" in caught.value.message
    assert name in caught.value.fix


def test_a_malformed_restart_count_does_not_fail_a_launch() -> None:
    """SLURM_RESTART_COUNT is for the job script and the checkpoint manifest, not the launch."""
    slurm = SlurmEnv.from_environ({**SRUN_TWO_NODES, "SLURM_RESTART_COUNT": "abc"})
    assert slurm == SlurmEnv.from_environ(SRUN_TWO_NODES)


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        (
            {"SLURM_PROCID": "2", "SLURM_STEP_NUM_TASKS": "2"},
            ["SLURM_PROCID=2", "below", "SLURM_STEP_NUM_TASKS=2"],
        ),
        (
            {"SLURM_STEP_NODELIST": "n[1-3]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"},
            ["SLURM_STEP_TASKS_PER_NODE='2(x2)'", "2 node(s)", "SLURM_STEP_NODELIST='n[1-3]'"],
        ),
        (
            {"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "1,1"},
            ["SLURM_TASKS_PER_NODE='1,1'", "SLURM_JOB_NODELIST='n1'", "lists 1"],
        ),
        (
            {**SRUN_TWO_NODES, "SLURM_STEP_NUM_TASKS": "5", "SLURM_PROCID": "0"},
            ["SLURM_STEP_TASKS_PER_NODE='2(x2)'", "adds up to 4", "SLURM_STEP_NUM_TASKS=5"],
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "2"},
            ["OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2"],
        ),
        ({"PMI_RANK": "4", "PMI_SIZE": "2"}, ["PMI_RANK=4", "below", "PMI_SIZE=2"]),
        ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "1"}, ["HOROVOD_RANK=1", "HOROVOD_SIZE=1"]),
        (
            {"HOROVOD_RANK": "0", "HOROVOD_LOCAL_RANK": "2", "HOROVOD_LOCAL_SIZE": "2"},
            ["HOROVOD_LOCAL_RANK=2", "HOROVOD_LOCAL_SIZE=2"],
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
            | {"OMPI_COMM_WORLD_LOCAL_SIZE": "3"},
            ["OMPI_COMM_WORLD_LOCAL_SIZE=3", "at most", "OMPI_COMM_WORLD_SIZE=2"],
        ),
        ({"SLURM_STEP_NODELIST": "n[2-1]"}, ["SLURM_STEP_NODELIST='n[2-1]'"]),
        ({"SLURM_TASKS_PER_NODE": "2(x0)"}, ["SLURM_TASKS_PER_NODE='2(x0)'"]),
    ],
)
def test_inconsistent_or_malformed_environment(environ: dict[str, str], words: list[str]) -> None:
    with pytest.raises(EnvironmentParseError) as caught:
        JobEnv.from_environ(environ, "h")
    for word in words:
        assert word in caught.value.message
    assert caught.value.fix


@pytest.mark.parametrize(
    "environ",
    [
        # Counts that only disagree outside a step are not checked against each other.
        {"SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_NODELIST": "n[1-2]", "SLURM_STEP_NUM_TASKS": "5"},
        {"SLURM_STEP_ID": "batch", "SLURM_STEP_NUM_TASKS": "1", "SLURM_TASKS_PER_NODE": "4"}
        | {"SLURM_NODELIST": "n1"},
        {"SLURM_PROCID": "5"},
        {"SLURM_TASKS_PER_NODE": "1,1"},
        {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
        {"OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
    ],
)
def test_consistent_partial_environments(environ: dict[str, str]) -> None:
    JobEnv.from_environ(environ, "h")


@pytest.mark.parametrize(
    ("environ", "visible", "source"),
    [
        ({}, None, None),
        ({"CUDA_VISIBLE_DEVICES": "2,3"}, ("2", "3"), "CUDA_VISIBLE_DEVICES"),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,6"}, ("0", "1", "2", "3", "4", "6"), None),
        ({"CUDA_VISIBLE_DEVICES": " 0 , 1 "}, ("0", "1"), None),
        ({"CUDA_VISIBLE_DEVICES": ""}, (), None),
        ({"CUDA_VISIBLE_DEVICES": "  "}, (), None),
        ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, (), None),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, (), None),
        (
            {"CUDA_VISIBLE_DEVICES": "GPU-8f3c2a1e-1b2c-4d5e-8f90-a1b2c3d4e5f6,GPU-0a1b"},
            ("GPU-8f3c2a1e-1b2c-4d5e-8f90-a1b2c3d4e5f6", "GPU-0a1b"),
            None,
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "MIG-6a1f2c3d-4e5f-5a6b-9c7d-0e1f2a3b4c5d"},
            ("MIG-6a1f2c3d-4e5f-5a6b-9c7d-0e1f2a3b4c5d",),
            None,
        ),
        (
            {"CUDA_VISIBLE_DEVICES": "MIG-GPU-8f3c2a1e-1b2c-4d5e-8f90-a1b2c3d4e5f6/1/0"},
            ("MIG-GPU-8f3c2a1e-1b2c-4d5e-8f90-a1b2c3d4e5f6/1/0",),
            None,
        ),
        ({"CUDA_VISIBLE_DEVICES": "", "SLURM_STEP_GPUS": "0"}, (), "CUDA_VISIBLE_DEVICES"),
        ({"SLURM_STEP_GPUS": "1", "SLURM_JOB_GPUS": "0,1"}, ("1",), "SLURM_STEP_GPUS"),
        ({"GPU_DEVICE_ORDINAL": "0,1", "SLURM_JOB_GPUS": "2"}, ("0", "1"), "GPU_DEVICE_ORDINAL"),
        ({"SLURM_JOB_GPUS": "0,1"}, ("0", "1"), "SLURM_JOB_GPUS"),
    ],
)
def test_gpus(environ: dict[str, str], visible: tuple[str, ...] | None, source: str | None) -> None:
    env = GpuEnv.from_environ(environ)
    assert env.visible == visible
    assert env.source == (source or next(iter(environ), None))


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0,,1", ["''", "not a GPU index"]),
        ("0,", ["''", "not a GPU index"]),
        ("gpu0", ["'gpu0'", "not a GPU index"]),
        ("GPU-", ["'GPU-'"]),
        ("GPU-xyz", ["'GPU-xyz'"]),
        ("MIG-", ["'MIG-'"]),
        ("0,-1", ["'-1'"]),
        ("\u0663", ["not a GPU index"]),
        ("0,1,0", ["GPU '0' twice"]),
        ("0,00", ["GPU '00' twice"]),
        ("GPU-ab,GPU-AB", ["GPU 'GPU-AB' twice"]),
    ],
)
def test_gpus_malformed(value: str, words: list[str]) -> None:
    with pytest.raises(EnvironmentParseError) as caught:
        GpuEnv.from_environ({"SLURM_STEP_GPUS": value})
    assert f"SLURM_STEP_GPUS={value!r}" in caught.value.message
    for word in words:
        assert word in caught.value.message
    assert "SLURM_STEP_GPUS" in caught.value.fix


def test_objects_are_frozen() -> None:
    env = JobEnv.from_environ(SRUN_ONE_NODE, "gpu01")
    with pytest.raises(AttributeError):
        env.hostname = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        env.slurm.procid = 0  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# What each refusal says, message and fix in full (the `ctrain: error: ... Fix: ...` line).

MIXED_FIX = (
    "run inside one Slurm step (srun) or one MPI launch, and do not copy SLURM_*, OMPI_*, "
    "PMI_* or HOROVOD_* variables between shells or jobs"
)


@pytest.mark.parametrize(
    ("environ", "name", "message"),
    [
        ({"SLURM_PROCID": "x"}, "SLURM_PROCID", "SLURM_PROCID='x' is not a whole number >= 0."),
        (
            {"SLURM_NTASKS": " -2 "},
            "SLURM_NTASKS",
            "SLURM_NTASKS=' -2 ' is not a whole number >= 0.",
        ),
        (
            {"SLURM_NPROCS": "four"},
            "SLURM_NPROCS",
            "SLURM_NPROCS='four' is not a whole number >= 0.",
        ),
        (
            {"PMI_RANK": "0", "PMI_SIZE": "1.0"},
            "PMI_SIZE",
            "PMI_SIZE='1.0' is not a whole number >= 0.",
        ),
    ],
)
def test_a_non_number_refused_in_full(environ: dict[str, str], name: str, message: str) -> None:
    with pytest.raises(EnvironmentParseError) as caught:
        JobEnv.from_environ(environ, "h")
    assert caught.value.message == message
    assert caught.value.fix == f"check the value your launcher set; {name} should look like 0 or 4"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "2"},
            "SLURM_PROCID=2 must be below SLURM_STEP_NUM_TASKS=2.",
        ),
        (
            {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "3"},
            "SLURM_PROCID=3 must be below SLURM_STEP_NUM_TASKS=2.",
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "4"},
            "OMPI_COMM_WORLD_RANK=4 must be below OMPI_COMM_WORLD_SIZE=4.",
        ),
        (
            {"HOROVOD_RANK": "0", "HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "1"},
            "HOROVOD_LOCAL_RANK=1 must be below HOROVOD_LOCAL_SIZE=1.",
        ),
        (
            {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_SIZE": "3"},
            "HOROVOD_LOCAL_SIZE=3 must be at most HOROVOD_SIZE=2.",
        ),
        (
            {"PMI_RANK": "3", "PMI_SIZE": "3"},
            "PMI_RANK=3 must be below PMI_SIZE=3.",
        ),
        (
            {"SLURM_STEP_NODELIST": "n[1-3]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"},
            "SLURM_STEP_TASKS_PER_NODE='2(x2)' gives 2 node(s) but "
            "SLURM_STEP_NODELIST='n[1-3]' lists 3.",
        ),
        (
            {"SLURM_NODELIST": " n1 ", "SLURM_TASKS_PER_NODE": " 1,1 "},
            "SLURM_TASKS_PER_NODE='1,1' gives 2 node(s) but SLURM_NODELIST='n1' lists 1.",
        ),
        (
            {**SRUN_TWO_NODES, "SLURM_STEP_NUM_TASKS": "5", "SLURM_PROCID": "0"},
            "SLURM_STEP_TASKS_PER_NODE='2(x2)' adds up to 4 task(s) but SLURM_STEP_NUM_TASKS=5.",
        ),
        (
            {**SRUN_TWO_NODES, "SLURM_STEP_NUM_TASKS": "3", "SLURM_PROCID": "0"},
            "SLURM_STEP_TASKS_PER_NODE='2(x2)' adds up to 4 task(s) but SLURM_STEP_NUM_TASKS=3.",
        ),
    ],
)
def test_a_contradiction_refused_in_full(environ: dict[str, str], message: str) -> None:
    with pytest.raises(EnvironmentParseError) as caught:
        JobEnv.from_environ(environ, "h")
    assert (caught.value.message, caught.value.fix) == (message, MIXED_FIX)


@pytest.mark.parametrize(
    "environ",
    [
        {"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"},
        {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4"},
        {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_SIZE": "2"},
        {"HOROVOD_RANK": "0", "HOROVOD_LOCAL_RANK": "0", "HOROVOD_LOCAL_SIZE": "1"},
        {**SRUN_TWO_NODES, "SLURM_STEP_NUM_TASKS": "4"},
        {"SLURM_STEP_ID": "0", "SLURM_STEP_TASKS_PER_NODE": "3", "SLURM_STEP_NODELIST": "n1"},
    ],
)
def test_the_limits_themselves_are_accepted(environ: dict[str, str]) -> None:
    JobEnv.from_environ(environ, "h")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0,x", "SLURM_JOB_GPUS='0,x' lists 'x', which is not a GPU index or GPU-/MIG- UUID."),
        (" 1 ,", "SLURM_JOB_GPUS=' 1 ,' lists '', which is not a GPU index or GPU-/MIG- UUID."),
        ("1,01", "SLURM_JOB_GPUS='1,01' lists GPU '01' twice."),
        ("MIG-ab/1/0,mig-AB/1/0", "SLURM_JOB_GPUS='MIG-ab/1/0,mig-AB/1/0' lists 'mig-AB/1/0', "
         "which is not a GPU index or GPU-/MIG- UUID."),
        ("MIG-ab/1/0,MIG-AB/1/0", "SLURM_JOB_GPUS='MIG-ab/1/0,MIG-AB/1/0' lists GPU 'MIG-AB/1/0' "
         "twice."),
    ],
)  # fmt: skip
def test_a_bad_gpu_list_refused_in_full(value: str, message: str) -> None:
    with pytest.raises(EnvironmentParseError) as caught:
        GpuEnv.from_environ({"SLURM_JOB_GPUS": value})
    assert caught.value.message == message
    assert caught.value.fix == "set SLURM_JOB_GPUS to a list such as 0,1 or GPU-<uuid>, or unset it"


@pytest.mark.parametrize(
    ("value", "visible"),
    [
        ("3", ("3",)),
        ("10,2", ("10", "2")),
        ("GPU-AB12,0", ("GPU-AB12", "0")),
        ("MIG-GPU-ab/3/0,MIG-ab", ("MIG-GPU-ab/3/0", "MIG-ab")),
        ("MIG-1-2/0/1", ("MIG-1-2/0/1",)),
    ],
)
def test_gpu_items(value: str, visible: tuple[str, ...]) -> None:
    assert GpuEnv.from_environ({"GPU_DEVICE_ORDINAL": value}) == GpuEnv(
        visible, "GPU_DEVICE_ORDINAL"
    )


@pytest.mark.parametrize(
    ("environ", "message", "fix"),
    [
        (
            {"SLURM_STEP_TASKS_PER_NODE": "2(x0)", "SLURM_TASKS_PER_NODE": "2"},
            "SLURM_STEP_TASKS_PER_NODE='2(x0)' is not a valid Slurm tasks-per-node value: "
            "term '2(x0)' repeats zero times.",
            "check the value Slurm set; it should look like 2(x3),1",
        ),
        (
            {"SLURM_JOB_NODELIST": "n[2-1]", "SLURM_NODELIST": "n1"},
            "SLURM_JOB_NODELIST='n[2-1]' is not a valid Slurm hostlist: range '2-1' is descending.",
            "check the value Slurm set; it should look like node[01-04],gpu1",
        ),
    ],
)
def test_a_malformed_list_names_the_variable_it_came_from(
    environ: dict[str, str], message: str, fix: str
) -> None:
    with pytest.raises(EnvironmentParseError) as caught:
        SlurmEnv.from_environ(environ)
    assert (caught.value.message, caught.value.fix) == (message, fix)
