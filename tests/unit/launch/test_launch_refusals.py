"""What the launch core tells the user when it refuses (the one `ctrain: error: ... Fix: ...`
line, so each message and fix is written here in full), and the details of a rank's
environment that the other tests leave open. Written to kill the mutants `make mutation`
found alive (docs/testing.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctrain.errors import CtrainError, LaunchError
from ctrain.launch.hostlist import MAX_HOSTS, expand_hostlist, expand_tasks_per_node
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.modes import Placement, choose_mode, placement
from ctrain.launch.plan import (
    LaunchOptions,
    make_plan,
    pin_gpus,
    worker_hosts,
)
from ctrain.launch.ports import PORT_BLOCK, PortWindow, port_block, worker_ports
from ctrain.names import Mode
from ctrain.settings import resolve
from ctrain.settings_table import Settings
from tests.support.environs import JOB, STEP2, slurm_step
from tests.support.helpers import refusal

HOSTLIST_FIX = "check the value Slurm set; it should look like node[01-04],gpu1"
CONTRADICTION = "the launcher's variables contradict each other; relaunch with srun or mpirun"


def job(environ: dict[str, str]) -> JobEnv:
    return JobEnv.from_environ(environ, "vm")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("a[1[2]]", "nested brackets"),
        ("a]1", "']' without a matching '['"),
        ("a[1", "'[' without a matching ']'"),
        ("a[]", "empty range '[]'"),
        ("a,,b", "empty host name"),
    ],
)
def test_a_malformed_hostlist_says_why(value: str, reason: str) -> None:
    message = f"SLURM_JOB_NODELIST={value!r} is not a valid Slurm hostlist: {reason}."
    assert refusal(lambda: expand_hostlist(value, "SLURM_JOB_NODELIST")) == (message, HOSTLIST_FIX)


def test_exactly_the_largest_expansion_is_accepted() -> None:
    assert len(expand_tasks_per_node(f"1(x{MAX_HOSTS})")) == MAX_HOSTS
    with pytest.raises(CtrainError):
        expand_tasks_per_node(f"1(x{MAX_HOSTS + 1})")


BATCH4 = {**JOB, "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}
SRUN3 = slurm_step(1, 3)


@pytest.mark.parametrize(
    ("environ", "request_", "message", "fix"),
    [
        (
            BATCH4,
            "auto",
            "the job has SLURM_NTASKS=4 but this command runs once, outside any srun step",
            "launch it with srun (srun ctrain launch -- ...), or ask for --ntasks=1",
        ),
        (
            SRUN3,
            "mirrored",
            "--mode mirrored runs one process, but 3 were started",
            "use --mode multiworker or horovod, or start one task (srun -n 1)",
        ),
        (
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "3"},
            "single",
            "--mode single runs one process, but 3 were started",
            "use --mode multiworker or horovod, or start one task (srun -n 1)",
        ),
        (
            BATCH4,
            "multiworker",
            "--mode multiworker with SLURM_NTASKS=4 but no srun step",
            "launch it with srun (srun ctrain launch -- ...) or mpirun",
        ),
        (
            SRUN3,
            "horovod",
            "--mode horovod under srun with 3 tasks but no MPI/PMI variables",
            "use srun --mpi=pmix (or mpirun/horovodrun) so Horovod's MPI can start",
        ),
    ],
)
def test_a_mode_that_does_not_fit_the_launch_says_why(
    environ: dict[str, str], request_: str, message: str, fix: str
) -> None:
    assert refusal(lambda: choose_mode(request_, job(environ), 0)) == (message, fix)


def test_one_task_in_a_batch_script_is_not_a_multi_task_launch() -> None:
    # SLURM_NTASKS unset (one task) or 1, outside a step: runs once, as it should
    assert choose_mode("auto", job(JOB), 0) is Mode.SINGLE
    assert choose_mode("multiworker", job({**JOB, "SLURM_NTASKS": "1"}), 0) is Mode.MULTIWORKER


def test_mpirun_with_one_rank_or_an_unknown_size_is_one_process() -> None:
    one = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}
    assert choose_mode("auto", job(one), 0) is Mode.SINGLE
    assert choose_mode("single", job({"OMPI_COMM_WORLD_RANK": "0"}), 0) is Mode.SINGLE


def test_srun_sizes_default_to_one_task() -> None:
    # a step that does not say how many tasks it has is one task: single is allowed
    step = slurm_step(SLURM_STEP_NUM_TASKS=None, SLURM_NTASKS=None)
    assert choose_mode("single", job(step), 0) is Mode.SINGLE
    assert placement(Mode.SINGLE, job(step)).size == 1


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        (
            {"OMPI_COMM_WORLD_RANK": "1"},  # no size: one rank, so rank 1 cannot be
            "rank 1 is not below the world size 1 (openmpi)",
        ),
        (
            {
                "OMPI_COMM_WORLD_RANK": "0",
                "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            },  # no local size: one local rank, so local rank 1 cannot be
            "local rank 1 is not below the local size 1 (openmpi)",
        ),
    ],
)
def test_contradicting_launcher_variables_are_refused(
    environ: dict[str, str], message: str
) -> None:
    assert refusal(lambda: placement(Mode.HOROVOD, job(environ))) == (message, CONTRADICTION)


def test_mpi_local_rank_defaults_to_zero() -> None:
    environ = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert placement(Mode.HOROVOD, job(environ)) == Placement(1, 2, 0, 1, "openmpi")


def test_tasks_per_node_that_do_not_add_up_say_why() -> None:
    assert refusal(lambda: worker_hosts(("a", "b"), (2, 1), 4, "block")) == (
        "the step's tasks per node [2, 1] do not add up to its 4 tasks",
        "launch with srun so Slurm sets SLURM_STEP_TASKS_PER_NODE",
    )
    # no tasks per node: one task on each node
    assert worker_hosts(("a", "b"), (), 2, "block") == ("a", "b")


@pytest.mark.parametrize("plane_size", [None, "", "0", "x"])
def test_plane_without_a_size_says_why(plane_size: str | None) -> None:
    assert refusal(lambda: worker_hosts(("a",), (2,), 2, "plane", plane_size)) == (
        f"SLURM_DISTRIBUTION=plane but SLURM_DIST_PLANESIZE={plane_size!r}",
        "launch with srun -m plane=N so Slurm sets both",
    )


def test_every_rank_gets_a_node_once_and_in_turn() -> None:
    assert worker_hosts(("a", "b"), (3, 1), 4, "plane", "2") == ("a", "a", "b", "a")
    assert worker_hosts(("a", "b"), (1, 1), 2, "cyclic") == ("a", "b")


def test_the_port_block_of_a_job_step() -> None:
    assert port_block("10", "3") == 73
    assert port_block(None, None) == 0
    assert port_block("x", "batch") == 0
    assert port_block("5", None) == 35


def test_port_refusals_say_why() -> None:
    hosts = ("a",) * (PORT_BLOCK + 1)
    assert refusal(lambda: worker_ports(hosts, PortWindow(20000), 0)) == (
        f"{PORT_BLOCK + 1} ranks on a; ctrain gives at most {PORT_BLOCK} per node",
        "use fewer tasks per node",
    )
    assert refusal(lambda: worker_ports(("a",), PortWindow(65536), 0)) == (
        "port 65536 is above 65535",
        "lower CTRAIN_PORT_BASE",
    )


def test_too_few_gpus_names_them() -> None:
    with pytest.raises(LaunchError) as raised:
        pin_gpus(Mode.HOROVOD, ("4", "5"), 2, 3)
    assert raised.value.fix == (
        "ask Slurm for one GPU per task (--gpus-per-task=1) or fewer tasks per node"
    )
    assert raised.value.message == "3 ranks on this node but only 2 GPUs visible (4,5)"


def test_the_rank_environment_in_full() -> None:
    env = {**STEP2, "CUDA_PATH": "/opt/cuda", "XLA_FLAGS": "--xla_dump_to=/d", "no_proxy": "x"}
    options = LaunchOptions(collective="ring", collective_timeout=90)
    plan = make_plan(job(env), options, env, ())
    assert plan.mode is Mode.MULTIWORKER
    assert {k: v for k, v in plan.env_set.items() if k.startswith("CTRAIN_")} == {
        "CTRAIN_LAUNCH_MODE": "multiworker",
        "CTRAIN_RANK": "1",
        "CTRAIN_WORLD_SIZE": "2",
        "CTRAIN_LOCAL_RANK": "1",
        "CTRAIN_LOCAL_SIZE": "2",
        "CTRAIN_LAUNCH_COLLECTIVE": "ring",
        "CTRAIN_LAUNCH_COLLECTIVE_TIMEOUT": "90",
    }
    assert plan.env_set["XLA_FLAGS"] == "--xla_dump_to=/d --xla_gpu_cuda_data_dir=/opt/cuda"
    assert "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" not in plan.env_set  # not Horovod
    assert "OMP_NUM_THREADS" not in plan.env_set  # no SLURM_CPUS_PER_TASK
    assert plan.env_set["no_grpc_proxy"] == plan.env_set["no_proxy"]
    assert plan.env_set["NO_GRPC_PROXY"] == plan.env_set["no_proxy"]
    tf_config = plan.env_set["TF_CONFIG"]
    assert " " not in tf_config and json.loads(tf_config) == plan.tf_config
    explained = plan.explain()
    assert (explained["local_size"], explained["rank_source"]) == (2, "slurm")
    assert explained["collective"] == plan.collective


def test_xla_flags_that_name_the_cuda_directory_are_left_alone() -> None:
    flags = "--xla_gpu_cuda_data_dir=/mine"
    env = {"CUDA_HOME": "/opt/cuda", "XLA_FLAGS": flags}
    plan = make_plan(job(env), LaunchOptions(), env, ())
    assert "XLA_FLAGS" not in plan.env_set
    assert "XLA_FLAGS" not in make_plan(job({}), LaunchOptions(), {}, ()).env_set


def test_launch_options_come_from_the_settings(tmp_path: Path) -> None:
    environ = {
        "HOME": str(tmp_path),
        "CTRAIN_MODE": "horovod",
        "CTRAIN_COLLECTIVE": "ring",
        "CTRAIN_COLLECTIVE_TIMEOUT": "77",
        "CTRAIN_PORT_BASE": "30000",
        "CTRAIN_KEEP_PROXIES": "1",
        "CTRAIN_KERAS": "3",
    }
    options = LaunchOptions.from_settings(resolve({}, environ, tmp_path))
    assert options == LaunchOptions("horovod", "ring", 77, 30000, True, True, "3")
    defaults = LaunchOptions.from_settings(resolve({}, {"HOME": str(tmp_path)}, tmp_path))
    assert defaults == LaunchOptions()
    assert LaunchOptions.from_settings(Settings()) == LaunchOptions()  # no sources: not chosen


def test_the_banner_says_what_this_rank_does() -> None:
    env = {**STEP2, "CUDA_VISIBLE_DEVICES": "0,1"}
    plan = make_plan(job(env), LaunchOptions(collective="ring"), env, ("0", "1"))
    assert plan.banner() == (
        "ctrain: mode=multiworker world_size=2 nodes=1 gpus/rank=1 collective=ring ranks-from=slurm"
    )
    alone = make_plan(job({}), LaunchOptions(), {}, ())
    assert alone.banner() == (
        f"ctrain: mode=single world_size=1 nodes=1 gpus/rank=none collective={alone.collective} "
        "ranks-from=none"
    )


def test_multiworker_across_nodes_without_slurm_says_why() -> None:
    mpi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4"}
    mpi |= {"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
    assert refusal(lambda: make_plan(job(mpi), LaunchOptions(mode="multiworker"), mpi, ())) == (
        "multiworker across nodes needs Slurm's node list, and this launch has none",
        "start the ranks with srun, or use --mode horovod under mpirun",
    )


def test_a_two_task_batch_script_is_refused() -> None:
    two = {**JOB, "SLURM_NTASKS": "2", "SLURM_PROCID": "0"}
    assert refusal(lambda: choose_mode("auto", job(two), 0))[0].startswith(
        "the job has SLURM_NTASKS=2 but this command runs once"
    )


def test_mpirun_without_a_size_is_one_process() -> None:
    assert choose_mode("auto", job({"OMPI_COMM_WORLD_RANK": "0"}), 0) is Mode.SINGLE


def test_what_the_user_set_is_kept() -> None:
    mpi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
    mine = {**mpi, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "5", "OMP_NUM_THREADS": "3"}
    mine |= {"SLURM_JOB_ID": "7", "SLURM_CPUS_PER_TASK": "8"}
    plan = make_plan(job(mine), LaunchOptions(), mine, ())
    assert plan.mode is Mode.HOROVOD
    assert "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" not in plan.env_set
    assert "OMP_NUM_THREADS" not in plan.env_set
    given = make_plan(job(mpi), LaunchOptions(collective_timeout=42), mpi, ())
    assert given.env_set["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "42"
    cpus = {**STEP2, "SLURM_CPUS_PER_TASK": "8"}
    assert make_plan(job(cpus), LaunchOptions(), cpus, ()).env_set["OMP_NUM_THREADS"] == "8"


def test_mirrored_gets_every_visible_gpu() -> None:
    plan = make_plan(job({}), LaunchOptions(), {}, ("0", "1"))
    assert plan.mode is Mode.MIRRORED and plan.env_set["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "gpus/rank=0,1 " in plan.banner()


def test_horovod_under_srun_pmix_takes_its_ranks_from_pmix() -> None:
    env = {**STEP2, "PMIX_RANK": "1"}
    plan = make_plan(job(env), LaunchOptions(mode="horovod"), env, ())
    assert (plan.mode, plan.place.rank, plan.place.source) == (Mode.HOROVOD, 1, "pmix")


def test_an_exported_keras_choice_decides_the_keras3_hook() -> None:
    env = {**STEP2, "TF_USE_LEGACY_KERAS": "0"}  # Keras 3, although the script imports tf.keras
    plan = make_plan(job(env), LaunchOptions(), env, (), script_imports_keras=False)
    assert plan.mode is Mode.MULTIWORKER and "startup" in plan.env_set["PYTHONPATH"]
