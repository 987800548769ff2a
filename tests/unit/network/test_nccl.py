"""NCCL's NCCL_DEBUG=INFO lines, parsed per process: lines composed here and in nccl_logs.py in
the shapes of NCCL 2.21.5, 2.27.7 and 2.30.7 (src/ctrain/network/nccl.py names the source
files), with invented hosts, pids and addresses."""

from __future__ import annotations

import pytest

from ctrain.network import nccl
from tests.support.nccl_logs import SOCKET_2_21, info

IB_DEVICES = "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]"
COMM = "nNodes 2 localRanks 1 localRank 0 MNNVL 0"
# Two nodes over InfiniBand, 2.27.7: rank 0 on gpu-a01, rank 1 on gpu-a02 (srun --label prefixes
# rank 1's lines, as `srun -l` does); GPUDirect RDMA on the sends.
IB_2_27 = (
    info(
        "gpu-a01:48211:48211 [0]",
        "Bootstrap: Using ib0:10.20.0.11<0>",
        "NCCL version 2.27.7+cuda12.9",
    )
    + info(
        "gpu-a01:48211:48290 [0]",
        "NET/Plugin: Could not find: libnccl-net.so. ",
        f"NET/IB : Using {IB_DEVICES}; OOB ib0:10.20.0.11<0>",
        "Initialized NET plugin IB",
        "Assigned NET plugin IB to comm",
        "Using network IB",
        f"comm 0x55d0c8a1e2f0 rank 0 nRanks 2 {COMM}",
    )
    + info(
        "gpu-a01:48211:48291 [0]",
        "Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0",
        "Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA",
        "Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/1(1)/GDRDMA/Shared",
    )
    + info("1: gpu-a02:51877:51877 [0]", "NCCL version 2.27.7+cuda12.9")
    + info(
        "1: gpu-a02:51877:51950 [0]",
        f"NET/IB : Using {IB_DEVICES}; OOB ib0:10.20.0.12<0>",
        "Using network IB",
        f"comm 0x5581f00d2a40 rank 1 nRanks 2 {COMM}",
    )
    + info(
        "1: gpu-a02:51877:51951 [0]",
        "Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0/GDRDMA",
        "Channel 00/0 : 1[0] -> 0[0] [send] via NET/IB/0",
    )
)

# One node, 4 GPUs in one process (MirroredStrategy): P2P only, the network named but unused.
ONE_NODE_2_27 = (
    info("node3:700:700 [0]", "NCCL version 2.27.7+cuda12.9")
    + info(
        "node3:700:731 [0]",
        "NET/IB : No device found.",
        "NET/Socket : Using [0]eno1:192.0.2.3<0>",
        "Using network Socket",
        "comm 0x1 rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0",
    )
    + info(
        "node3:700:731 [1]", "comm 0x2 rank 1 nRanks 4 nNodes 1 localRanks 4 localRank 1 MNNVL 0"
    )
    + info("node3:700:740 [0]", "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read")
    + info("node3:700:740 [1]", "Channel 00/0 : 1[1] -> 2[2] via P2P/direct pointer/read")
    + info("node3:700:740 [2]", "Channel 00/0 : 2[2] -> 3[3] via P2P/CUMEM")
    + "2026-11-26 04:12:00.000001: I tensorflow/core/common_runtime/gpu/gpu_device.cc:2021] x\n"
)


def test_infiniband_on_two_nodes() -> None:
    rank0, rank1 = nccl.parse_log(IB_2_27.splitlines())
    assert rank0.host == "gpu-a01" and rank0.pid == 48211
    assert (rank0.rank, rank0.nranks, rank0.nnodes) == (0, 2, 2)
    assert rank0.version == "2.27.7+cuda12.9"
    assert rank0.network == "IB"
    assert rank0.ib_devices == ("mlx5_0:1/IB", "mlx5_1:1/RoCE")
    assert rank0.transports == ("NET/IB",)
    assert rank0.gdr and not rank0.uses_socket
    assert rank0.plugins == (
        "NET/Plugin: Could not find: libnccl-net.so.",
        "Initialized NET plugin IB",
        "Assigned NET plugin IB to comm",
    )
    assert (rank1.host, rank1.rank, rank1.transports) == ("gpu-a02", 1, ("NET/IB",))
    assert rank0.describe() == (
        "rank 0 (gpu-a01 pid 48211): NCCL 2.27.7+cuda12.9, network IB, via NET/IB (GDRDMA)"
    )


def test_socket_fallback_with_p2p_and_shm_inside_the_node() -> None:
    (report,) = nccl.parse_log(SOCKET_2_21.splitlines())
    assert report.version == "2.21.5+cuda12.4"
    assert report.network == "Socket"
    assert report.no_verbs and not report.ib_none
    assert report.sockets == ("eth0", "ib0")
    assert report.transports == ("NET/Socket", "P2P/IPC", "SHM")
    assert report.uses_socket and not report.gdr
    assert report.who() == "rank 3 (gpu-b07 pid 9120)"
    assert "libibverbs not loadable" in report.describe()


def test_one_node_uses_no_network_but_names_it() -> None:
    (report,) = nccl.parse_log(ONE_NODE_2_27.splitlines())
    assert report.rank == 0  # the process's first communicator
    assert report.ib_none
    assert report.transports == ("P2P/CUMEM", "P2P/direct pointer")
    assert report.net_transports == ()
    assert report.uses_socket  # chose Socket, even if no channel needed it


def test_plugin_network() -> None:
    lines = [
        "h1:5:5 [0] NCCL INFO NET/Plugin: Loaded net plugin AWS Libfabric (v7)",
        "h1:5:5 [0] NCCL INFO Using network AWS Libfabric",
        "h1:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0/GDRDMA",
        "h1:5:6 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0",
    ]
    (report,) = nccl.parse_log(lines)
    assert report.network == "AWS Libfabric"
    assert report.transports == ("COLLNET/SHARP", "NET/AWS Libfabric")
    assert report.net_transports == report.transports
    assert not report.uses_socket
    assert report.plugins == ("NET/Plugin: Loaded net plugin AWS Libfabric (v7)",)


def test_warnings_are_kept_and_other_lines_ignored() -> None:
    lines = [
        "",
        "not nccl at all",
        "h2:77:77 [0] NCCL CALL ncclGroupStart()",
        "h2:77:80 [0] net_socket.cc:50 NCCL WARN NET/Socket : no interface found",
        "h2:77:80 [0] 12.5 init.cc:1 NCCL TRACE something",
    ]
    (report,) = nccl.parse_log(lines)
    assert report.warnings == ("NET/Socket : no interface found",)
    assert report.rank is None and report.version == "" and report.transports == ()
    assert report.who() == "rank ? (h2 pid 77)"
    assert report.describe() == "rank ? (h2 pid 77): NCCL ?, network ?, no channel lines"


def test_processes_sort_by_rank() -> None:
    lines = [
        "b:2:2 [0] NCCL INFO comm 0x1 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
        "a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
    ]
    assert [r.host for r in nccl.parse_log(lines)] == ["a", "b"]


@pytest.mark.parametrize(
    ("via", "kind"),
    [
        ("NET/IB/0", "NET/IB"),
        ("NET/IB/1(3)/GDRDMA(PCI)/Shared", "NET/IB"),
        ("NET/Socket/0", "NET/Socket"),
        ("P2P/IPC", "P2P/IPC"),
        ("P2P/IPC/read/CE", "P2P/IPC"),
        ("P2P/CUMEM/read", "P2P/CUMEM"),
        ("P2P/MNNVL", "P2P/MNNVL"),
        ("P2P/direct pointer/read", "P2P/direct pointer"),
        ("P2P/indirect/2[2]", "P2P/indirect"),
        ("SHM/CE/direct", "SHM"),
        ("COLLNET/IB/0/GDRDMA", "COLLNET/IB"),
    ],
)
def test_transport_kind(via: str, kind: str) -> None:
    assert nccl.transport_kind(via) == kind


# 2.30.7 (TensorFlow 2.21's image): NCCL's own warnings name their function, libibverbs is tried
# library by library ("Count not open", NCCL's spelling), devices may carry a rail and a plane,
# and an external plugin is an "external network plugin".
IB_2_30 = info(
    "gpu-c01:700:701 [0]",
    "NCCL version 2.30.7+cuda12.9",
    "Count not open libibverbs.so",
    "Successfully loaded external network plugin libnccl-net-ofi.so",
    "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1:3/RoCE [2]mlx5_2:1::1/IB [RO]; OOB ib0:10.9.0.1<0>",
    "comm 0x5555 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
) + (
    "gpu-c01:700:702 [0] transport/net_ib/connect.cc:412 (ncclIbConnect) NCCL WARN "
    "NET/IB : ibv_modify_qp failed with 110 Connection timed out\n"
)
NO_VERBS_2_30 = info(
    "gpu-c02:800:801 [0]",
    "NCCL version 2.30.7+cuda12.9",
    "Count not open libibverbs.so",
    "Count not open libibverbs.so.1",
    "NET/Socket : Using [0]eth0:10.9.0.2<0>",
    "Using network Socket",
)


def test_the_lines_of_nccl_2_30() -> None:
    (report,) = nccl.parse_log(IB_2_30.splitlines())
    assert report.version == "2.30.7+cuda12.9"
    assert report.ib_devices == ("mlx5_0:1/IB", "mlx5_1:1:3/RoCE", "mlx5_2:1::1/IB")
    assert report.plugins == ("Successfully loaded external network plugin libnccl-net-ofi.so",)
    assert report.warnings == ("NET/IB : ibv_modify_qp failed with 110 Connection timed out",)
    assert not report.no_verbs  # libibverbs.so failed, libibverbs.so.1 opened
    (fallback,) = nccl.parse_log(NO_VERBS_2_30.splitlines())
    assert fallback.no_verbs and fallback.sockets == ("eth0",)
