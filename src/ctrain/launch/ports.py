"""The ports a job step's ranks listen on, clear of the node's ephemeral port range.

Linux gives every outgoing connection a local port from ``net.ipv4.ip_local_port_range``
(32768-60999 unless a site changes it), except the ports listed in
``net.ipv4.ip_local_reserved_ports``. A rank that listens on a port of that range finds it taken,
at random, by whatever connection got it first: EADDRINUSE at rendezvous. ctrain's ports come
from a window of ``PORT_SPAN`` ports from ``--port-base`` (20000-31999 by default, below Linux's
default range). A site that lowers the range over that window (9000-65000 is seen on clusters)
gets the window moved to the larger free side of its range (never below 10000, where services
listen), or, when the user chose the base, a refusal naming a base that is free.

Every rank computes every rank's port, so every rank must see the same range: the nodes of one
job are taken to share their kernel settings, as the nodes of one partition do.
"""

from __future__ import annotations

from typing import NamedTuple

from ctrain.errors import LaunchError

PORT_SPAN = 12000  # ports a node's job steps share: PORT_SPAN // PORT_BLOCK blocks
PORT_BLOCK = 64  # ports a job step may use on one node: one per local rank
# The ports of a block that one rank of the step listens on for the whole step, counted from the
# block's end (a multiworker step's per-rank ports come from its start; neither mode uses both).
RENDEZVOUS_SLOT = PORT_BLOCK - 1  # Horovod's Gloo rendezvous on rank 0's node (launch/gloo.py)
PEER_WATCH_SLOT = PORT_BLOCK - 2  # rank 0's peer-loss watch (launch/peers.py)
# A window is never moved below: there lie the privileged ports and those of common services
# (Slurm's slurmctld and slurmd on 6817-6818 of every node, for one).
LOWEST = 10000
HIGHEST = 65535


class Ephemeral(NamedTuple):
    """A node's ephemeral port range and the ports reserved out of it."""

    low: int
    high: int
    reserved: tuple[tuple[int, int], ...] = ()  # inclusive ranges

    @classmethod
    def parse(cls, port_range: str, reserved: str = "") -> Ephemeral:
        """From the text of /proc/sys/net/ipv4/ip_local_port_range ("9000\\t65000") and of
        ip_local_reserved_ports ("8080,9000-9100", or empty)."""
        try:
            low, high = (int(word) for word in port_range.split())
            spans = []
            for item in reserved.strip().split(","):
                if item.strip():
                    first, _, last = item.strip().partition("-")
                    spans.append((int(first), int(last or first)))
        except ValueError as exc:
            raise LaunchError(
                f"cannot read the ephemeral port range {port_range.strip()!r} "
                f"(reserved: {reserved.strip()!r})",
                "check /proc/sys/net/ipv4/ip_local_port_range on this node",
            ) from exc
        return cls(low, high, tuple(spans))

    def takes(self, first: int, last: int) -> tuple[int, ...]:
        """The ports of [first, last] an outgoing connection may take."""
        low, high = max(first, self.low), min(last, self.high)
        return tuple(
            port
            for port in range(low, high + 1)
            if not any(a <= port <= b for a, b in self.reserved)
        )

    def __str__(self) -> str:
        return f"{self.low}-{self.high}"


class PortWindow(NamedTuple):
    """The ports [base, base + span) this node's job steps take their blocks from."""

    base: int
    span: int = PORT_SPAN
    # Why it is not [--port-base, + PORT_SPAN) and which way it moved, a sentence for --explain
    # and rank 0's stderr; "" where it was not moved.
    moved: str = ""

    @property
    def last(self) -> int:
        return self.base + self.span - 1

    def block(self, job_id: str | None, step_id: str | None) -> int:
        """A block of ports for this job step: consecutive job ids and steps get distinct
        blocks."""
        return port_block(job_id, step_id, self.span // PORT_BLOCK)

    def step_port(self, job_id: str | None, step_id: str | None, slot: int) -> int:
        """Port ``slot`` of this job step's block (``RENDEZVOUS_SLOT``, ``PEER_WATCH_SLOT``)."""
        return self.base + self.block(job_id, step_id) * PORT_BLOCK + slot


def port_block(
    job_id: str | None, step_id: str | None, blocks: int = PORT_SPAN // PORT_BLOCK
) -> int:
    """A block of ports for this job step, of ``blocks``."""
    job = int(job_id) if job_id and job_id.isdigit() else 0
    step = int(step_id) if step_id and step_id.isdigit() else 0
    return (job * 7 + step) % blocks


def _free_sides(ephemeral: Ephemeral) -> list[tuple[str, PortWindow]]:
    """The windows beside the range, each at most PORT_SPAN and a whole number of blocks, each
    after the side of the range it lies on: ``below`` or ``above``."""
    below_base = max(LOWEST, ephemeral.low - PORT_SPAN)
    sides = [
        (below_base, ephemeral.low - below_base, "below"),
        (ephemeral.high + 1, HIGHEST - ephemeral.high, "above"),
    ]
    return [
        (side, PortWindow(base, min(size, PORT_SPAN) // PORT_BLOCK * PORT_BLOCK))
        for base, size, side in sides
        if size >= PORT_BLOCK
    ]


def choose_window(base: int, chosen: bool, ephemeral: Ephemeral | None) -> PortWindow:
    """The window of ports for ``--port-base`` ``base`` on a node with ``ephemeral``.

    ``chosen``: the user set the base (a flag, a variable or a file), so it is kept or refused,
    never moved. ``ephemeral`` None: the range is unknown (not Linux), and the window is kept.
    """
    wanted = PortWindow(base)
    if ephemeral is None:
        return wanted
    taken = ephemeral.takes(wanted.base, min(wanted.last, HIGHEST))
    if not taken:
        return wanted
    sides = sorted(_free_sides(ephemeral), key=lambda free: free[1].span, reverse=True)
    where = (
        f"ports {wanted.base}-{wanted.last} lie in this node's ephemeral port range {ephemeral} "
        "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's port"
    )
    if not sides:
        raise LaunchError(
            where,
            "ask the site to reserve ports for jobs (net.ipv4.ip_local_reserved_ports) "
            "and set --port-base (CTRAIN_PORT_BASE) to the first of them",
        )
    side, best = sides[0]
    if chosen:
        raise LaunchError(
            where, f"--port-base {best.base} (CTRAIN_PORT_BASE): {best.span} ports {side} the range"
        )
    return best._replace(moved=f"{where}: moved {side} it")


def worker_ports(hosts: tuple[str, ...], window: PortWindow, block: int) -> tuple[int, ...]:
    """One port per rank: the step's block of ``window``, offset by the rank's index on its own
    node."""
    seen: dict[str, int] = {}
    by_rank = []
    for host in hosts:
        index = seen.get(host, 0)
        seen[host] = index + 1
        if index >= PORT_BLOCK:
            raise LaunchError(
                f"{index + 1} ranks on {host}; ctrain gives at most {PORT_BLOCK} per node",
                "use fewer tasks per node",
            )
        by_rank.append(window.base + block * PORT_BLOCK + index)
    if by_rank:
        refuse_above_highest(max(by_rank))
    return tuple(by_rank)


def refuse_above_highest(port: int) -> None:
    """A LaunchError when ``port`` is above HIGHEST, the last TCP port."""
    if port > HIGHEST:
        raise LaunchError(f"port {port} is above {HIGHEST}", "lower CTRAIN_PORT_BASE")
