"""The peer-loss watch: when a rank's process is gone, the other ranks of its step end at once.

Under ``srun --mpi=pmix`` without ``--kill-on-bad-exit`` a Horovod rank whose peer died waits in
MPI for ever (launch/peers.py), and only the stall watchdog would end it, after
``CTRAIN_STALL_TIMEOUT``. There ``ctrain launch`` hands every rank rank 0's address
(``CTRAIN_LAUNCH_PEER_WATCH``): rank 0 listens on it, and every other rank keeps one TCP
connection to it. The kernel closes a process's connections however it ends (SIGKILL, a crash),
and a lost node's connections reset, so a connection that closes without a goodbye is a lost
rank: the rank at the other end prints one line naming it and ends with ``STALLED_EXIT_CODE``,
like a stalled rank (a fault of the moment, not the script's error: the job scripts treat it so).
When another rank is lost, rank 0 ends, and its connections closing end the rest; when rank 0
is lost, every other rank sees its own connection close.

A rank that ends in order says goodbye first: at exit (unless an exception went uncaught: a
crashed rank must end the others too) and where ctrain ends the process with the requeue code
(train/stopping.py); a rank that got a goodbye watches no more. Nothing else is sent, so a slow
rank, a long compilation or a checkpoint is never a loss. The ranks connect with retries until
the launch's collective timeout, as ranks start seconds apart; one that cannot, or a rank 0 that
some rank never reaches, ends with an error saying so.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple

from ctrain.errors import STALLED_EXIT_CODE, LaunchError
from ctrain.names import ENV_LAUNCH_PEER_WATCH, Launched

Ender = Callable[[int, str], None]  # print the line, end the process (stopping.end_process)
GOODBYE = b"bye\n"
RETRY = 0.5  # seconds between two tries to connect


class Address(NamedTuple):
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit():
            raise LaunchError(
                f"{ENV_LAUNCH_PEER_WATCH}={text!r} is not HOST:PORT",
                f"start the script with ctrain launch, or unset {ENV_LAUNCH_PEER_WATCH}",
            )
        return cls(host, int(port))


def lost_line(rank: str, host: str, me: int) -> str:
    return (
        f"ctrain: error: rank {rank} on {host} is lost: its process ended without a goodbye "
        f"(killed, crashed, or its node gone), and MPI would wait for it for ever; ending rank "
        f"{me} with {STALLED_EXIT_CODE}"
    )


@dataclass
class Peer:
    """What rank 0 knows of one connection: the rank and host its hello named, and whether it
    said goodbye."""

    conn: socket.socket
    data: bytes = b""
    rank: str = "?"
    host: str = "?"
    bye: bool = False

    def read(self, data: bytes) -> None:
        self.data += data
        lines = self.data.split(b"\n")
        if self.rank == "?" and len(lines) > 1:
            rank, _, host = lines[0].decode(errors="replace").partition(" ")
            self.rank, self.host = rank, host
        self.bye = self.bye or GOODBYE in self.data


class PeerWatch:
    """One rank's side of the watch: rank 0 serves, every other rank connects to it; ``end``
    ends the process, ``timeout`` is how long the ranks may take to connect."""

    def __init__(
        self, address: Address, rank: int, size: int, timeout: float, end: Ender, host: str
    ) -> None:
        self.address = address
        self.rank = rank
        self.size = size
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.end = end
        self.host = host
        self.lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self.leaving = False  # goodbye said: a closing connection is no loss any more
        self.crashed = False  # an exception went uncaught: no goodbye at exit

    def start(self) -> None:
        """Listen (rank 0) or connect (the others) in a daemon thread; say goodbye at exit."""
        os.register_at_fork(after_in_child=self._forked)
        atexit.register(self._at_exit)
        sys.excepthook = self._excepthook(sys.excepthook)
        if self.rank == 0:
            listener = self._listen()
            if listener is None:
                return
            thread = threading.Thread(target=self.serve, args=(listener,), daemon=True)
        else:
            thread = threading.Thread(target=self.watch_rank_0, daemon=True)
        thread.name = "ctrain-peer-watch"
        thread.start()

    def goodbye(self) -> None:
        """Tell the other end(s) that this rank ends in order."""
        with self.lock:
            self.leaving = True
            for conn in self.sockets:
                with contextlib.suppress(OSError):
                    conn.sendall(GOODBYE)

    def _listen(self) -> socket.socket | None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("", self.address.port))
            listener.listen(self.size)
        except OSError as exc:
            listener.close()
            error = LaunchError(
                f"rank 0 cannot listen on port {self.address.port} of {self.address.host} for "
                f"the peer-loss watch ({exc.strerror})",
                "another step on this node uses the same ports: start the step again, or give "
                "it other ports (--port-base, CTRAIN_PORT_BASE)",
            )
            self.end(LaunchError.exit_code, error.line())
            return None
        with self.lock:
            self.sockets.append(listener)
        return listener

    def serve(self, listener: socket.socket) -> None:
        """Rank 0: accept every rank's connection; end at the first that closes without a
        goodbye, or when some rank has not connected by the deadline. Returns once every rank
        has said goodbye."""
        chosen = selectors.DefaultSelector()
        chosen.register(listener, selectors.EVENT_READ)
        reached: set[str] = set()
        while True:
            waiting = len(reached) < self.size - 1
            left = self.deadline - time.monotonic()
            if waiting and left <= 0:
                self._never_connected(reached)
                return
            for key, _ in chosen.select(left if waiting else None):
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    with self.lock:
                        self.sockets.append(conn)
                    chosen.register(conn, selectors.EVENT_READ, Peer(conn))
                    continue
                peer: Peer = key.data
                data = _recv(peer.conn)
                peer.read(data)
                if peer.rank != "?":
                    reached.add(peer.rank)
                if data:
                    continue
                chosen.unregister(peer.conn)
                if not (peer.bye or peer.rank == "?" or self.leaving):
                    self.end(STALLED_EXIT_CODE, lost_line(peer.rank, peer.host, self.rank))
                    return
                if len(reached) == self.size - 1 and len(chosen.get_map()) == 1:
                    return  # only the listener is left: every rank ended in order

    def _never_connected(self, reached: set[str]) -> None:
        missing = [str(rank) for rank in range(1, self.size) if str(rank) not in reached]
        self.end(
            STALLED_EXIT_CODE,
            f"ctrain: error: rank(s) {','.join(missing)} did not reach rank 0's peer-loss watch "
            f"on port {self.address.port} within {self.timeout:g} s (CTRAIN_COLLECTIVE_TIMEOUT): "
            f"they never started or were lost; ending rank 0 with {STALLED_EXIT_CODE}",
        )

    def watch_rank_0(self) -> None:
        """Every other rank: connect to rank 0, then end when the connection closes without a
        goodbye."""
        conn = self._connect()
        if conn is None:
            return
        with self.lock:
            if self.leaving:
                return
            self.sockets.append(conn)
            conn.sendall(f"{self.rank} {self.host}\n".encode())
        data = b""
        while GOODBYE not in data:
            got = _recv(conn)
            if not got:
                if not self.leaving:
                    self.end(STALLED_EXIT_CODE, lost_line("0", self.address.host, self.rank))
                return
            data += got

    def _connect(self) -> socket.socket | None:
        while True:
            try:
                conn = socket.create_connection(self.address, timeout=10)
            except OSError as exc:
                if time.monotonic() < self.deadline:
                    time.sleep(RETRY)
                    continue
                self.end(
                    STALLED_EXIT_CODE,
                    LaunchError(
                        f"rank {self.rank} could not reach rank 0's peer-loss watch at "
                        f"{self.address.host}:{self.address.port} within {self.timeout:g} s "
                        f"(CTRAIN_COLLECTIVE_TIMEOUT; {exc}): rank 0 never started or was lost",
                        "see rank 0's output; a firewall between the nodes must let the step's "
                        "ports through (--port-base, CTRAIN_PORT_BASE)",
                    ).line(),
                )
                return None
            conn.settimeout(None)
            return conn

    def _at_exit(self) -> None:
        if not self.crashed:
            self.goodbye()

    def _excepthook(self, previous: Callable[..., object]) -> Callable[..., None]:
        def hook(
            kind: type[BaseException], value: BaseException, traceback: TracebackType | None
        ) -> None:
            self.crashed = True
            previous(kind, value, traceback)

        return hook

    def _forked(self) -> None:
        """In a forked child (a data loader's worker): its copies of the connections must not
        keep them open when this rank dies, nor say goodbye for it."""
        self.leaving = True
        for conn in self.sockets:
            conn.close()  # the child's descriptor only: no shutdown, the parent's stays open
        self.sockets = []


def _recv(conn: socket.socket) -> bytes:
    """What came, b"" at the end or a reset (a node lost)."""
    try:
        return conn.recv(256)
    except OSError:
        return b""


class Armed:
    """The watch of this process, armed once (by the start-up hook or ``ctrain.distributed``)."""

    def __init__(self) -> None:
        self.watch: PeerWatch | None = None

    def arm_from(self, environ: Mapping[str, str], end: Ender) -> None:
        """Start the watch where ``ctrain launch`` asked for one (``CTRAIN_LAUNCH_PEER_WATCH``)."""
        text = environ.get(ENV_LAUNCH_PEER_WATCH)
        launched = Launched.from_env(environ)
        if self.watch is not None or not text or launched is None:
            return
        address = Address.parse(text)
        timeout = launched.collective_timeout
        self.watch = PeerWatch(address, launched.rank, launched.size, timeout, end, _hostname())
        self.watch.start()

    def goodbye(self) -> None:
        if self.watch is not None:
            self.watch.goodbye()


def _hostname() -> str:
    return os.uname().nodename


WATCH = Armed()
