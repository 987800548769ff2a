"""Per-rank preparation: GPU pinning, ports, TF_CONFIG, proxies and the environment."""

from __future__ import annotations

import json

import pytest

from ctrain.errors import LaunchError
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.plan import (
    PROXY_VARIABLES,
    LaunchOptions,
    Plan,
    child_environ,
    make_plan,
    pin_gpus,
    worker_hosts,
)
from ctrain.launch.ports import PORT_BLOCK, Ephemeral, PortWindow, port_block, worker_ports
from ctrain.names import Mode
from tests.support.environs import slurm_step


def step(procid: int, localid: int, nodeid: int, **extra: str) -> dict[str, str]:
    """Rank ``procid`` of a 4-task srun step over gpu-a[07-08], 2 tasks per node."""
    return slurm_step(
        procid, 4, "gpu-a[07-08]", per_node="2(x2)", local=localid, node=nodeid, job="4242",
        step="3", **extra,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "visible", "local_rank", "local_size", "expected"),
    [
        (Mode.MULTIWORKER, ("2", "3"), 1, 2, ("3",)),
        (Mode.HOROVOD, ("0", "1", "2", "3", "4", "6"), 5, 6, ("6",)),
        (Mode.HOROVOD, ("0", "1", "2", "3", "4", "6"), 0, 6, ("0",)),
        (Mode.HOROVOD, ("GPU-aa", "GPU-bb"), 1, 2, ("GPU-bb",)),
        # --gpus-per-task=1: each task sees its own single GPU, whatever its local rank
        (Mode.MULTIWORKER, ("5",), 3, 4, ("5",)),
        (Mode.HOROVOD, ("GPU-cc",), 1, 2, ("GPU-cc",)),
        (Mode.MIRRORED, ("2", "3"), 0, 1, ("2", "3")),
        (Mode.SINGLE, ("2", "3"), 0, 1, ("2",)),
        (Mode.SINGLE, (), 0, 1, ()),
        (Mode.HOROVOD, (), 1, 2, ()),
    ],
)
def test_pin_gpus(
    mode: Mode,
    visible: tuple[str, ...],
    local_rank: int,
    local_size: int,
    expected: tuple[str, ...],
) -> None:
    assert pin_gpus(mode, visible, local_rank, local_size) == expected


def test_pin_gpus_refuses_too_few() -> None:
    with pytest.raises(LaunchError, match="4 ranks on this node but only 2 GPUs") as caught:
        pin_gpus(Mode.HOROVOD, ("0", "1"), 3, 4)
    assert "--gpus-per-task" in caught.value.fix


def test_worker_hosts_block_and_cyclic() -> None:
    nodes = ("n2", "n10", "n3")
    assert worker_hosts(nodes, (2, 1, 1), 4, "block") == ("n2", "n2", "n10", "n3")
    assert worker_hosts(nodes, (2, 1, 1), 4, "cyclic") == ("n2", "n10", "n3", "n2")
    with pytest.raises(LaunchError, match="do not add up"):
        worker_hosts(nodes, (2, 1, 1), 5, "block")


def test_ports_distinct_on_a_node_and_between_jobs() -> None:
    hosts = ("a", "a", "b", "b")
    ports = worker_ports(hosts, PortWindow(20000), port_block("100", "0"))
    assert ports[0] != ports[1] and ports[2] != ports[3]
    assert all(20000 <= p < 32000 for p in ports)
    other = worker_ports(hosts, PortWindow(20000), port_block("101", "0"))
    assert not set(ports) & set(other)
    next_step = worker_ports(hosts, PortWindow(20000), port_block("100", "1"))
    assert not set(ports) & set(next_step)


def test_consecutive_jobs_never_share_ports() -> None:
    blocks = {port_block(str(job), "0") for job in range(1000, 1100)}
    assert len(blocks) == 100


def test_too_many_ranks_per_node() -> None:
    with pytest.raises(LaunchError, match="per node"):
        worker_ports(("a",) * (PORT_BLOCK + 1), PortWindow(20000), 0)


def test_multiworker_plan_for_every_rank() -> None:
    plans = [
        make_plan(JobEnv.from_environ(step(r, r % 2, r // 2), "x"), LaunchOptions(), {}, ())
        for r in range(4)
    ]
    cluster = plans[0].tf_config["cluster"]["worker"]  # type: ignore[index]
    base = 20000 + port_block("4242", "3") * PORT_BLOCK
    assert cluster == [
        f"gpu-a07:{base}",
        f"gpu-a07:{base + 1}",
        f"gpu-a08:{base}",
        f"gpu-a08:{base + 1}",
    ]
    for rank, plan in enumerate(plans):
        assert plan.mode is Mode.MULTIWORKER
        assert plan.tf_config == {
            "cluster": {"worker": cluster},
            "task": {"type": "worker", "index": rank},
        }
        assert json.loads(plan.env_set["TF_CONFIG"]) == plan.tf_config
        assert plan.hosts == ("gpu-a07", "gpu-a08")


def test_gpus_pinned_by_local_rank_from_slurm_visible_set() -> None:
    env = step(3, 1, 1, CUDA_VISIBLE_DEVICES="2,3")
    plan = make_plan(JobEnv.from_environ(env, "x"), LaunchOptions(), env, ("2", "3"))
    assert plan.gpus == ("3",)
    assert plan.env_set["CUDA_VISIBLE_DEVICES"] == "3"
    assert plan.collective == "nccl"


def test_no_gpu_leaves_cuda_visible_devices_alone() -> None:
    env = step(0, 0, 0)
    plan = make_plan(JobEnv.from_environ(env, "x"), LaunchOptions(), env, ())
    assert "CUDA_VISIBLE_DEVICES" not in plan.env_set
    assert plan.collective == "ring"


def test_proxies_removed_and_no_proxy_covers_hosts() -> None:
    proxies = {name: "http://proxy.example:3128" for name in PROXY_VARIABLES}
    env = step(0, 0, 0, no_proxy="corp.example", **proxies)
    plan = make_plan(JobEnv.from_environ(env, "x"), LaunchOptions(), env, ())
    child = child_environ(env, plan)
    assert not any(name in child for name in PROXY_VARIABLES)
    for name in ("no_proxy", "NO_PROXY", "no_grpc_proxy", "NO_GRPC_PROXY"):
        assert child[name] == "corp.example,localhost,127.0.0.1,gpu-a07,gpu-a08"
    kept = make_plan(JobEnv.from_environ(env, "x"), LaunchOptions(keep_proxies=True), env, ())
    assert child_environ(env, kept)["https_proxy"] == "http://proxy.example:3128"


def test_defaults_are_set_only_when_absent() -> None:
    env = {"NCCL_DEBUG": "INFO", "CUDA_HOME": "/opt/cuda", "SLURM_CPUS_PER_TASK": "6"}
    plan = make_plan(JobEnv.from_environ(env, "x"), LaunchOptions(), env, ())
    child = child_environ(env, plan)
    assert child["NCCL_DEBUG"] == "INFO"
    assert child["TF_USE_LEGACY_KERAS"] == "1"
    assert child["PYTHONNOUSERSITE"] == "1"
    assert child["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert child["XLA_FLAGS"] == "--xla_gpu_cuda_data_dir=/opt/cuda"
    assert child["OMP_NUM_THREADS"] == "6"
    assert "NCCL_DEBUG" not in plan.env_set


def test_horovod_gets_stall_shutdown_from_collective_timeout() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    plan = make_plan(JobEnv.from_environ(env, "x"), LaunchOptions(collective_timeout=90), env, ())
    assert plan.mode is Mode.HOROVOD
    assert plan.env_set["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "90"
    assert plan.tf_config is None and plan.ports == ()


def test_multiworker_under_mpirun_on_one_node_uses_this_host() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    plan = make_plan(JobEnv.from_environ(env, "me"), LaunchOptions(mode="multiworker"), env, ())
    assert [w.split(":")[0] for w in plan.tf_config["cluster"]["worker"]] == ["me", "me"]  # type: ignore[index]


def test_multiworker_across_nodes_without_slurm_is_refused() -> None:
    env = {
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "4",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }
    with pytest.raises(LaunchError, match="node list"):
        make_plan(JobEnv.from_environ(env, "me"), LaunchOptions(mode="multiworker"), env, ())


def test_explain_has_the_documented_keys() -> None:
    env = step(1, 1, 0)
    plan = make_plan(JobEnv.from_environ(env, "x"), LaunchOptions(), env, ())
    shown = plan.explain()
    for key in (
        "mode",
        "rank",
        "world_size",
        "local_rank",
        "hosts",
        "ports",
        "gpus",
        "tf_config",
        "env",
    ):
        assert key in shown
    assert shown["rank"] == 1 and shown["world_size"] == 4
    assert set(shown["env"]) == {"set", "unset"}


@pytest.mark.parametrize("local_rank", range(4))
def test_too_few_gpus_is_refused_for_every_local_rank(local_rank: int) -> None:
    with pytest.raises(LaunchError, match="4 ranks on this node but only 2 GPUs"):
        pin_gpus(Mode.HOROVOD, ("0", "1"), local_rank, 4)


def test_neighbouring_jobs_and_steps_get_distinct_port_blocks() -> None:
    """Job N+1 step 0 never shares ports with job N step 1 (nor any first steps of nearby jobs)."""
    assert port_block("501", "0") != port_block("500", "1")
    pairs = [(job, step) for job in range(500, 505) for step in range(7)]
    blocks = {port_block(str(job), str(step)) for job, step in pairs}
    assert len(blocks) == len(pairs)


@pytest.mark.parametrize(
    ("hosts", "base", "block", "highest"),
    [
        (("a",), 65535, 0, 65535),
        (("a", "a"), 65534, 0, 65535),
        (("a", "a"), 65535, 0, 65536),
        (("a", "b"), 65535, 0, 65535),
        (("a",), 65000, 9, 65576),
        (("a",), 20000, 186, 31904),
    ],
)
def test_no_port_above_65535(hosts: tuple[str, ...], base: int, block: int, highest: int) -> None:
    if highest <= 65535:
        assert max(worker_ports(hosts, PortWindow(base), block)) == highest
    else:
        with pytest.raises(LaunchError, match=f"port {highest} is above 65535") as caught:
            worker_ports(hosts, PortWindow(base), block)
        assert "CTRAIN_PORT_BASE" in caught.value.fix


# Written out here, not taken from the module: what docs/multi-node.md promises `ctrain launch`
# removes.
PROXIES_REMOVED = (
    "http_proxy",
    "HTTP_PROXY",
    "https_proxy",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "grpc_proxy",
    "GRPC_PROXY",
)
NO_PROXY_NAMES = ("no_proxy", "NO_PROXY", "no_grpc_proxy", "NO_GRPC_PROXY")


def _child(env: dict[str, str], keep: bool = False) -> dict[str, str]:
    job = JobEnv.from_environ(env, "x")
    return child_environ(env, make_plan(job, LaunchOptions(keep_proxies=keep), env, ()))


@pytest.mark.parametrize("name", PROXIES_REMOVED)
def test_each_proxy_variable_is_removed_and_kept_on_request(name: str) -> None:
    env = step(0, 0, 0, **{name: "http://proxy.example:3128"})
    assert name not in _child(env)
    assert _child(env, keep=True)[name] == "http://proxy.example:3128"


def test_every_proxy_spelling_removed_at_once() -> None:
    env = step(1, 1, 0, **{name: "http://p:1" for name in PROXIES_REMOVED})
    child = _child(env)
    assert not set(PROXIES_REMOVED) & set(child)
    assert {k for k in child if k.lower().endswith("_proxy")} == set(NO_PROXY_NAMES)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, "localhost,127.0.0.1,gpu-a07,gpu-a08"),
        ({"no_proxy": "corp.example"}, "corp.example,localhost,127.0.0.1,gpu-a07,gpu-a08"),
        ({"NO_PROXY": " .corp , gpu-a07 "}, ".corp,gpu-a07,localhost,127.0.0.1,gpu-a08"),
        ({"no_proxy": "a", "NO_PROXY": "b"}, "a,localhost,127.0.0.1,gpu-a07,gpu-a08"),
    ],
)
def test_no_proxy_covers_localhost_and_the_job_hosts(given: dict[str, str], expected: str) -> None:
    """Every spelling of no_proxy (and gRPC's no_grpc_proxy) gets the same list, kept proxies
    or not: the user's entries first, then localhost and the job's hosts, each once."""
    env = step(0, 0, 0, **given)
    for keep in (False, True):
        child = _child(env, keep)
        assert {name: child[name] for name in NO_PROXY_NAMES} == dict.fromkeys(
            NO_PROXY_NAMES, expected
        )


# Rank -> node of `srun -N 2 -n 4` where n1 has 3 tasks and n2 one, for each distribution.
LAYOUTS = {
    None: ("n1", "n1", "n1", "n2"),  # srun's default is block
    "block": ("n1", "n1", "n1", "n2"),
    "block:cyclic": ("n1", "n1", "n1", "n2"),  # the part after ':' is within a node
    "cyclic": ("n1", "n2", "n1", "n1"),
    "cyclic:block": ("n1", "n2", "n1", "n1"),
    "cyclic:cyclic,Pack": ("n1", "n2", "n1", "n1"),
    "plane=2": ("n1", "n1", "n2", "n1"),
    "plane=1": ("n1", "n2", "n1", "n1"),
    "plane=4": ("n1", "n1", "n1", "n2"),
}


def _rank_env(layout: tuple[str, ...], rank: int, distribution: str | None) -> dict[str, str]:
    """What srun sets for ``rank`` of the two-node step laid out as ``layout``."""
    node = layout[rank]
    local, nodeid = layout[:rank].count(node), ("n1", "n2").index(node)
    env = slurm_step(rank, 4, "n[1-2]", per_node="3,1", local=local, node=nodeid, job="900")
    if distribution is not None:
        kind, _, size = distribution.partition("=")
        env["SLURM_DISTRIBUTION"] = kind
        if size:
            env["SLURM_DIST_PLANESIZE"] = size
    return env


@pytest.mark.parametrize("distribution", list(LAYOUTS))
def test_tf_config_follows_slurm_distribution(distribution: str | None) -> None:
    """Every rank's TF_CONFIG lists each rank on the node Slurm put it on, with the port of
    its local rank there, and the same cluster on every rank."""
    layout = LAYOUTS[distribution]
    plans: list[Plan] = []
    for rank in range(4):
        env = _rank_env(layout, rank, distribution)
        plans.append(make_plan(JobEnv.from_environ(env, layout[rank]), LaunchOptions(), env, ()))
    base = 20000 + port_block("900", "0") * PORT_BLOCK
    expected = [f"{node}:{base + layout[:rank].count(node)}" for rank, node in enumerate(layout)]
    for rank, plan in enumerate(plans):
        assert plan.tf_config == {
            "cluster": {"worker": expected},
            "task": {"type": "worker", "index": rank},
        }
        assert json.loads(plan.env_set["TF_CONFIG"]) == plan.tf_config
        assert plan.place.local_size == (3 if layout[rank] == "n1" else 1)


def test_plane_without_its_size_is_refused() -> None:
    with pytest.raises(LaunchError, match="SLURM_DIST_PLANESIZE=None"):
        worker_hosts(("a", "b"), (1, 1), 2, "plane")


def test_a_chosen_port_base_in_the_ephemeral_range_is_refused_not_moved() -> None:
    """Multiworker's ports: a base the user set is kept or refused; the default one is moved."""
    env, lowered = step(1, 1, 0), Ephemeral(9000, 65000)
    job = JobEnv.from_environ(env, "gpu-a07")
    with pytest.raises(LaunchError) as refused:
        make_plan(job, LaunchOptions(port_base_chosen=True), env, (), ephemeral=lowered)
    assert (refused.value.message, refused.value.fix) == (
        "ports 20000-31999 lie in this node's ephemeral port range 9000-65000 "
        "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's port",
        "--port-base 65001 (CTRAIN_PORT_BASE): 512 ports above the range",
    )
    moved = make_plan(job, LaunchOptions(), env, (), ephemeral=lowered)
    assert moved.ports == (65065, 65066, 65065, 65066)
