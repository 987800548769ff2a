"""RDMA device discovery on fake sysfs trees, and what a process sees (/dev, libibverbs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.network import rdma
from ctrain.network.rdma import Device, Port
from tests.support.fake_rdma import add_port, fake_root, fake_sysfs


def test_active_ib_roce_and_down_ports(tmp_path: Path) -> None:
    devices = rdma.discover(fake_sysfs(tmp_path))
    assert devices == (
        Device("mlx5_0", (Port(1, "ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)"),), ()),
        Device("mlx5_1", (Port(1, "ACTIVE", "Ethernet", "100 Gb/sec (4X EDR)"),), ("eth2",)),
        Device("mlx5_2", (Port(1, "DOWN", "InfiniBand", "10 Gb/sec (4X SDR)"),), ()),
    )
    assert [d.active for d in devices] == [True, True, False]
    assert [d.ports[0].kind for d in devices] == ["IB", "RoCE", "IB"]
    assert devices[1].describe() == ("mlx5_1: port 1 RoCE ACTIVE 100 Gb/sec (4X EDR) (netdev eth2)")


def test_no_devices_at_all(tmp_path: Path) -> None:
    assert rdma.discover(tmp_path / "sys") == ()
    (tmp_path / "sys" / "class" / "infiniband").mkdir(parents=True)
    assert rdma.discover(tmp_path / "sys") == ()


def test_ports_sort_by_number_and_missing_files_are_empty(tmp_path: Path) -> None:
    sys_root = tmp_path / "sys"
    add_port(sys_root, "hfi1_0", 10, "4: ACTIVE", "InfiniBand")
    add_port(sys_root, "hfi1_0", 2, "2: INIT", "")
    (sys_root / "class" / "infiniband" / "hfi1_0" / "ports" / "not-a-port").mkdir()
    (device,) = rdma.discover(sys_root)
    assert [(p.number, p.state, p.kind, p.rate) for p in device.ports] == [
        (2, "INIT", "?", ""),
        (10, "ACTIVE", "IB", ""),
    ]


def test_roce_netdev_from_gid_attrs_when_device_net_is_absent(tmp_path: Path) -> None:
    port = add_port(tmp_path / "sys", "rocep1s0f0", 1, "4: ACTIVE", "Ethernet")
    ndevs = port / "gid_attrs" / "ndevs"
    ndevs.mkdir(parents=True)
    (ndevs / "0").write_text("ens1f0\n")
    (ndevs / "1").write_text("ens1f0\n")
    (ndevs / "2").write_text("")  # an unused GID reads empty
    (device,) = rdma.discover(tmp_path / "sys")
    assert device.netdevs == ("ens1f0",)


@pytest.mark.parametrize(
    ("text", "state"),
    [("4: ACTIVE", "ACTIVE"), ("1: DOWN", "DOWN"), ("ACTIVE", "ACTIVE"), ("", "UNKNOWN")],
)
def test_parse_state(text: str, state: str) -> None:
    assert rdma.parse_state(text) == state


def test_visibility_sees_devices_libraries_and_providers(tmp_path: Path) -> None:
    root = fake_root(tmp_path, uverbs=True, lib=True, drivers=True, providers=True)
    seen = rdma.visibility({}, root)
    assert seen.uverbs == ("/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1")
    assert seen.libibverbs == ("/usr/lib/x86_64-linux-gnu/libibverbs.so.1",)
    assert seen.drivers == ("mlx5",)
    assert seen.providers == ("libefa-rdmav34.so", "libmlx5-rdmav34.so")
    assert seen.container == ""


def test_visibility_of_a_bare_container(tmp_path: Path) -> None:
    root = fake_root(tmp_path, uverbs=False, lib=False, drivers=False, providers=False)
    seen = rdma.visibility({"APPTAINER_CONTAINER": "/scratch/ctrain.sif"}, root)
    assert seen == rdma.Visibility((), (), (), (), "apptainer")


@pytest.mark.parametrize(
    ("environ", "marker", "runtime"),
    [
        ({}, None, ""),
        ({"APPTAINER_CONTAINER": "/x.sif"}, None, "apptainer"),
        ({"SINGULARITY_CONTAINER": "/x.sif"}, None, "singularity"),
        ({"CH_RUNNING": "Weird Al Yankovic"}, None, "charliecloud"),
        ({"container": "podman"}, None, "podman"),
        ({}, ".dockerenv", "docker"),
        ({}, "run/.containerenv", "podman"),
    ],
)
def test_container_runtime(
    tmp_path: Path, environ: dict[str, str], marker: str | None, runtime: str
) -> None:
    if marker:
        (tmp_path / marker).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / marker).touch()
    assert rdma.container_runtime(environ, tmp_path) == runtime
