"""NCCL's NCCL_DEBUG=INFO lines that more than one network test reads, composed in the shapes of
NCCL's own (src/ctrain/network/nccl.py names the source files), with invented hosts, pids and
addresses."""

from __future__ import annotations


def info(prefix: str, *messages: str) -> str:
    """NCCL INFO lines of one thread: ``prefix`` is ``HOST:PID:TID [DEV]``."""
    return "".join(f"{prefix} NCCL INFO {message}\n" for message in messages)


# The fallback: a container without /dev/infiniband, 2.21.5; the version line carries the
# timestamp NCCL_DEBUG_TIMESTAMP_LEVELS may add in 2.27 (harmless here).
SOCKET_2_21 = (
    info("[2026-11-26 04:10:11] gpu-b07:9120:9120 [0]", "NCCL version 2.21.5+cuda12.4")
    + info(
        "gpu-b07:9120:9188 [0]",
        "NET/Plugin: No plugin found (libnccl-net.so)",
        "NET/Plugin: Using internal network plugin.",
        "Failed to open libibverbs.so[.1]",
        "NET/Socket : Using [0]eth0:10.30.1.7<0> [1]ib0:10.40.1.7<0>",
        "Using network Socket",
        "comm 0x7f3a40001000 rank 3 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0",
    )
    + info(
        "gpu-b07:9120:9190 [0]",
        "Channel 00/0 : 2[0] -> 3[1] via P2P/IPC/read",
        "Channel 00/0 : 3[1] -> 0[0] [send] via NET/Socket/0",
        "Channel 01/0 : 3[1] -> 2[0] via SHM/direct/direct",
    )
)
