"""The network check's verdict as a truth table: host devices x container view x NCCL variables
x what NCCL did, each combination's status per line and the fix a socket fallback gets."""

from __future__ import annotations

import itertools

import pytest

from ctrain.network import advice
from ctrain.network.advice import Facts, NcclOutcome
from ctrain.network.nccl import RankReport
from ctrain.network.rdma import Device, Port, Visibility

IB_UP = Device("mlx5_0", (Port(1, "ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)"),), ())
IB_DOWN = Device("mlx5_0", (Port(1, "DOWN", "InfiniBand", ""),), ())
HOSTS = {"none": (), "down": (IB_DOWN,), "active": (IB_UP,)}

FULL = Visibility(("/dev/infiniband/uverbs0",), ("/usr/lib/libibverbs.so.1",), ("mlx5",),
                  ("libmlx5-rdmav34.so",), "apptainer")  # fmt: skip
VIEWS = {
    "full": FULL,
    "no-dev": FULL._replace(uverbs=()),
    "no-providers": FULL._replace(drivers=(), providers=()),
}
ENVS = {
    "clean": {},
    "ib-disabled": {"NCCL_IB_DISABLE": "1"},
    "hca-wrong": {"NCCL_IB_HCA": "=mlx4_0"},
}


def report(*transports: str, network: str = "IB", no_verbs: bool = False) -> RankReport:
    return RankReport("gpu1", 42, 0, 2, 2, "2.27.7+cuda12.9", network, (), False, no_verbs,
                      (), (), tuple(sorted(transports)), False, ())  # fmt: skip


NCCLS = {
    "no-gpus": NcclOutcome(0),
    "ib": NcclOutcome(4, (report("NET/IB", "P2P/CUMEM"),)),
    "socket": NcclOutcome(4, (report("NET/Socket", "SHM", network="Socket"),)),
    "one-node": NcclOutcome(4, (report("P2P/CUMEM"),)),
}


def expected(host: str, view: str, env: str, run: str) -> dict[str, str]:
    """The rules, stated once more in the test's own words."""
    active = host == "active"
    return {
        "rdma": {"none": "WARN", "down": "WARN", "active": "PASS"}[host],
        "rdma-view": "FAIL" if active and view != "full" else "PASS",
        "nccl-env": "WARN" if active and env != "clean" else "PASS",
        "nccl": "WARN" if run == "no-gpus" else "FAIL" if active and run == "socket" else "PASS",
    }


@pytest.mark.parametrize(
    ("host", "view", "env", "run"), list(itertools.product(HOSTS, VIEWS, ENVS, NCCLS))
)
def test_truth_table(host: str, view: str, env: str, run: str) -> None:
    facts = Facts(HOSTS[host], VIEWS[view], NCCLS[run], ENVS[env])
    found = advice.advise(facts)
    assert {f.name: f.status for f in found} == expected(host, view, env, run)
    assert all(f.fix for f in found if f.status != "PASS")


@pytest.mark.parametrize(
    ("view", "env", "no_verbs", "fix"),
    [
        ("full", "ib-disabled", False, "unset NCCL_IB_DISABLE"),
        ("no-dev", "ib-disabled", False, "unset NCCL_IB_DISABLE"),  # the variable first
        ("full", "hca-wrong", False, "set NCCL_IB_HCA to active devices (mlx5_0)"),
        ("no-dev", "clean", False, "ctrain exec --bind /dev/infiniband"),
        ("no-providers", "clean", False, "apt-get install libibverbs1 ibverbs-providers"),
        ("full", "clean", True, "apt-get install libibverbs1 ibverbs-providers"),
        ("full", "clean", False, "read NCCL's NET/IB lines"),
    ],
)
def test_a_socket_fallback_gets_the_likeliest_fix(
    view: str, env: str, no_verbs: bool, fix: str
) -> None:
    run = NcclOutcome(2, (report("NET/Socket", network="Socket", no_verbs=no_verbs),))
    nccl = advice.check_nccl(Facts((IB_UP,), VIEWS[view], run, ENVS[env]))
    assert nccl.status == "FAIL"
    assert nccl.detail.startswith("rank 0 (gpu1 pid 42): NET/Socket although mlx5_0 active")
    assert fix in nccl.fix


def test_no_devices_says_sockets_are_all_there_is() -> None:
    facts = Facts((), FULL, NcclOutcome(0), {})
    rdma = advice.check_host(facts)
    assert "no RDMA devices" in rdma.detail
    assert rdma.fix.startswith("sockets are all there is: set NCCL_SOCKET_IFNAME")
    named = advice.check_host(facts._replace(env={"NCCL_SOCKET_IFNAME": "eth1"}))
    assert named.status == "PASS" and "NCCL_SOCKET_IFNAME=eth1" in named.detail


def test_no_gpus_is_said_in_those_words() -> None:
    nccl = advice.check_nccl(Facts((), FULL, NcclOutcome(0), {}))
    assert (nccl.status, nccl.detail) == ("WARN", "no GPUs: NCCL not checked")


def test_the_view_says_where_it_runs() -> None:
    inside = advice.check_view(Facts((IB_UP,), FULL, NcclOutcome(0), {}))
    assert "inside a container (apptainer)" in inside.detail
    assert "/sys/class/infiniband shows the host's devices" in inside.detail
    host = advice.check_view(Facts((IB_UP,), FULL._replace(container=""), NcclOutcome(0), {}))
    assert host.detail.endswith("on the host")


def test_a_failed_allreduce_quotes_nccls_last_warning() -> None:
    warned = report()._replace(warnings=("NET/Socket : no interface found",))
    found = advice.check_nccl(Facts((), FULL, NcclOutcome(2, (warned,), "exit code 1"), {}))
    assert found.status == "FAIL"
    assert found.detail == (
        "the NCCL allreduce failed: exit code 1; NCCL: NET/Socket : no interface found"
    )


def test_no_nccl_lines_with_gpus() -> None:
    found = advice.check_nccl(Facts((), FULL, NcclOutcome(1), {}))
    assert found.status == "WARN" and "printed no NCCL line" in found.detail


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("mlx5", False),  # a prefix
        ("mlx5_0:1", False),
        ("=mlx5_0", False),
        ("=mlx5", True),  # exact: no device is called mlx5
        ("mlx4_0", True),
        ("^mlx5_0", True),  # excludes the only device
        ("^mlx5_1", False),
        ("mlx4_0,mlx5_0:1", False),
    ],
)
def test_ib_hca(value: str, problem: bool) -> None:
    assert bool(advice.ib_hca_problem(value, ("mlx5_0",))) is problem


def test_env_problems_only_matter_with_active_devices() -> None:
    env = {"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket", "NCCL_IB_HCA": "mlx4"}
    assert advice.env_problems(env, (IB_DOWN,)) == []
    fixes = [fix for _, fix in advice.env_problems(env, (IB_UP,))]
    assert fixes == [
        "unset NCCL_IB_DISABLE (or set it to 0)",
        "unset NCCL_NET",
        "set NCCL_IB_HCA to active devices (mlx5_0) or unset it",
    ]
    assert advice.env_problems({"NCCL_IB_DISABLE": "0", "NCCL_NET": "IB"}, (IB_UP,)) == []
