"""NCCL's ``NCCL_DEBUG=INFO`` output, parsed per process: version, network, transport per rank.

The line shapes are those of the NCCL releases the GPU images ship (matrix.toml's
nvidia-nccl-cu12 2.21.5, and 2.30.7 for TensorFlow 2.21 since 2.27.7; read in NVIDIA/nccl at tags
v2.21.5-1, v2.27.7-1 and v2.30.7-1):

- prefix (src/debug.cc): ``HOST:PID:TID [CUDADEV] NCCL INFO `` then the message, WARN lines
  ``HOST:PID:TID [CUDADEV] FILE:LINE NCCL WARN ``, and in 2.30 ``... FILE:LINE (FUNCTION) NCCL
  WARN `` for NCCL's own warnings; 2.27 and later may put a timestamp before it
  (NCCL_DEBUG_TIMESTAMP_LEVELS), and srun/mpirun may add their own label: the prefix is
  searched for, not anchored;
- ``NCCL version X.Y.Z+cudaA.B`` (src/init.cc), ``Using network NAME`` (src/init.cc; NAME
  ``IB``, ``Socket`` or a plugin's name), ``comm PTR rank R nRanks N nNodes M ...``;
- ``NET/IB : Using [0]mlx5_0:1/IB ...; OOB ...`` or ``NET/IB : No device found.``
  (src/transport/net_ib.cc; in 2.30 src/transport/net_ib/init.cc, where a device may carry its
  rail and plane: ``[1]mlx5_1:1:3/RoCE``, ``[2]mlx5_2:1::1/IB``), ``NET/Socket : Using
  [0]eth0:ADDR`` (net_socket.cc), libibverbs not loadable (src/misc/ibvsymbols.cc: ``Failed to
  open libibverbs.so[.1]`` before 2.30; in 2.30 ``Count not open LIB`` for each library tried,
  ``libibverbs.so.1`` last), ``NET/Plugin...`` and ``... NET plugin NAME``, ``... external
  [network] plugin NAME`` (src/net.cc in 2.21, src/plugin/net.cc in 2.27 and 2.30);
- channels: ``Channel CC/C : R[D] -> P[D] [send] via NET/IB/0/GDRDMA`` (transport/net.cc),
  ``... via P2P/IPC``, ``P2P/CUMEM/read``, ``P2P/direct pointer`` (p2p.cc),
  ``Channel CC : R[D] -> P[D] via SHM/direct/direct`` (shm.cc), ``CollNet ... via COLLNET/``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

_PREFIX = re.compile(
    r"(?P<host>[A-Za-z0-9_.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
    r"(?:(?P<info>NCCL INFO)|\S+(?: \([^)]*\))? NCCL WARN) (?P<msg>.*?)\s*$"
)
_VERSION = re.compile(r"^NCCL version (\S+)")
_NETWORK = re.compile(r"^Using network (.+)$")
_COMM = re.compile(r"^comm \S+ rank (\d+) nRanks (\d+) nNodes (\d+)")
_IB_USING = re.compile(r"^NET/IB ?: Using(.*)$")
_IB_DEVICE = re.compile(r"\[\d+\] ?([\w.-]+:\d+(?::\d*(?::\d+)?)?/\w+)")
_SOCKET_USING = re.compile(r"^NET/Socket ?: Using(.*)$")
_SOCKET_IF = re.compile(r"\[\d+\]([^:\s]+):")
_PLUGIN = re.compile(r"NET/Plugin|NET plugin|external (?:network )?plugin")
# libibverbs could not be opened: every library NCCL tried failed (2.30 tries libibverbs.so.1 last).
_NO_VERBS = re.compile(r"^(?:Failed to open libibverbs|Count not open libibverbs\.so\.1$)")
_CHANNEL = re.compile(
    r"^(?:Channel|CollNet) \d+(?:/\d+)? : \d+(?:\[\d+\])?(?: -> \d+\[\d+\])?"
    r"(?: \[(?:send|receive)\])? via (?P<via>.+)$"
)
_NET_VIA = re.compile(r"^NET/(?P<name>.+?)/\d+")

IB, SOCKET = "NET/IB", "NET/Socket"


def transport_kind(via: str) -> str:
    """``NET/IB/0/GDRDMA`` -> ``NET/IB``; ``P2P/CUMEM/read`` -> ``P2P/CUMEM``;
    ``SHM/direct/direct`` -> ``SHM``; ``COLLNET/IB/0`` -> ``COLLNET/IB``."""
    net = _NET_VIA.match(via)
    if net:
        return f"NET/{net.group('name')}"
    parts = via.split("/")
    if parts[0] == "SHM":
        return "SHM"
    return "/".join(parts[:2])


class NcclLine(NamedTuple):
    host: str
    pid: int
    info: bool  # INFO (else WARN)
    message: str


def parse_line(line: str) -> NcclLine | None:
    """One NCCL INFO or WARN line, or None for anything else."""
    fields = _PREFIX.search(line)
    if fields is None:
        return None
    pid = int(fields.group("pid"))
    return NcclLine(
        fields.group("host"), pid, fields.group("info") is not None, fields.group("msg")
    )


class RankReport(NamedTuple):
    """What one process's NCCL said."""

    host: str
    pid: int
    rank: int | None  # of its first communicator
    nranks: int | None
    nnodes: int | None
    version: str  # "2.27.7+cuda12.9", "" when not seen
    network: str  # "IB", "Socket", a plugin's name; "" when not seen
    ib_devices: tuple[str, ...]  # NCCL's list: "mlx5_0:1/IB", "mlx5_1:1/RoCE"
    ib_none: bool  # "NET/IB : No device found."
    no_verbs: bool  # "Failed to open libibverbs.so[.1]", 2.30: "Count not open libibverbs.so.1"
    sockets: tuple[str, ...]  # NET/Socket's interfaces
    plugins: tuple[str, ...]  # the NET/Plugin lines, as said
    transports: tuple[str, ...]  # the kinds its channels use, sorted: NET/IB, P2P/IPC, SHM...
    gdr: bool  # a NET channel uses GPUDirect RDMA
    warnings: tuple[str, ...]

    @property
    def uses_socket(self) -> bool:
        return SOCKET in self.transports or (not self.net_transports and self.network == "Socket")

    @property
    def net_transports(self) -> tuple[str, ...]:
        return tuple(t for t in self.transports if t.startswith(("NET/", "COLLNET/")))

    def who(self) -> str:
        rank = f"rank {self.rank}" if self.rank is not None else "rank ?"
        return f"{rank} ({self.host} pid {self.pid})"

    def describe(self) -> str:
        parts = [f"NCCL {self.version or '?'}", f"network {self.network or '?'}"]
        if self.transports:
            parts.append("via " + ", ".join(self.transports) + (" (GDRDMA)" if self.gdr else ""))
        else:
            parts.append("no channel lines")
        if self.ib_none:
            parts.append("NET/IB: no device found")
        if self.no_verbs:
            parts.append("libibverbs not loadable")
        return f"{self.who()}: {', '.join(parts)}"


@dataclass
class _Seen:
    host: str
    pid: int
    rank: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    version: str = ""
    network: str = ""
    ib_devices: list[str] = field(default_factory=list)
    ib_none: bool = False
    no_verbs: bool = False
    sockets: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    transports: set[str] = field(default_factory=set)
    gdr: bool = False
    warnings: list[str] = field(default_factory=list)

    def frozen(self) -> RankReport:
        return RankReport(
            self.host,
            self.pid,
            self.rank,
            self.nranks,
            self.nnodes,
            self.version,
            self.network,
            tuple(dict.fromkeys(self.ib_devices)),
            self.ib_none,
            self.no_verbs,
            tuple(dict.fromkeys(self.sockets)),
            tuple(dict.fromkeys(self.plugins)),
            tuple(sorted(self.transports)),
            self.gdr,
            tuple(dict.fromkeys(self.warnings)),
        )


def _take(seen: _Seen, msg: str) -> None:
    """One INFO message into what the process has said."""
    if (said := _VERSION.match(msg)) and not seen.version:
        seen.version = said.group(1)
    elif (said := _NETWORK.match(msg)) and not seen.network:
        seen.network = said.group(1).strip()
    elif (said := _COMM.match(msg)) and seen.rank is None:
        seen.rank, seen.nranks, seen.nnodes = (int(g) for g in said.groups())
    elif said := _CHANNEL.match(msg):
        via = said.group("via").strip()
        seen.transports.add(transport_kind(via))
        seen.gdr = seen.gdr or "/GDRDMA" in via
    elif said := _IB_USING.match(msg):
        seen.ib_devices.extend(_IB_DEVICE.findall(said.group(1)))
    elif msg.startswith("NET/IB") and "No device found" in msg:
        seen.ib_none = True
    elif said := _SOCKET_USING.match(msg):
        seen.sockets.extend(_SOCKET_IF.findall(said.group(1)))
    elif _NO_VERBS.match(msg):
        seen.no_verbs = True
    elif _PLUGIN.search(msg):
        seen.plugins.append(msg)


def parse_log(lines: Iterable[str]) -> tuple[RankReport, ...]:
    """Every process that wrote NCCL lines, in the order they first spoke, sorted by rank
    where the ranks are known."""
    by_process: dict[tuple[str, int], _Seen] = {}
    for raw in lines:
        line = parse_line(raw)
        if line is None:
            continue
        seen = by_process.setdefault((line.host, line.pid), _Seen(line.host, line.pid))
        if line.info:
            _take(seen, line.message)
        else:
            seen.warnings.append(line.message)
    reports = [seen.frozen() for seen in by_process.values()]
    return tuple(sorted(reports, key=lambda r: -1 if r.rank is None else r.rank))
