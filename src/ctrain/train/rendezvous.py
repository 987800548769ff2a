"""Horovod's Gloo rendezvous server, started by rank 0's ``ctrain launch`` when the ranks came
from a launcher of another MPI family (``ctrain.launch.gloo``): ``python -m
ctrain.train.rendezvous --port P --hosts H1,H2 --local-size L --size N --watch-pid PID``.

It is Horovod's own server (the one horovodrun --gloo runs), told how many ranks meet in each
scope, so it clears a scope only when all of them have read it. It ends with rank 0, its parent:
the kernel sends it SIGTERM then (Linux's parent-death signal), so the next launch finds the port
free.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import threading
import time

PR_SET_PDEATHSIG = 1  # prctl(2)


def slots(hosts: list[str], local_size: int, size: int) -> list[object]:
    """Horovod's slot of every rank: ranks fill each node in turn (what the scopes count)."""
    from horovod.runner.common.util.hosts import SlotInfo

    return [
        SlotInfo(
            hostname=hosts[rank // local_size],
            rank=rank,
            local_rank=rank % local_size,
            cross_rank=rank // local_size,
            size=size,
            local_size=local_size,
            cross_size=len(hosts),
        )
        for rank in range(size)
    ]


def end_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent ends (a no-op where prctl is missing)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctrain.train.rendezvous")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--local-size", type=int, required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--watch-pid", type=int, required=True)
    args = parser.parse_args(argv)
    end_with_parent()
    from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

    server = RendezvousHTTPServer(("", args.port), RendezvousHandler, 0)
    server.init(slots(args.hosts.split(","), args.local_size, args.size))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    while alive(args.watch_pid) and os.getppid() == args.watch_pid:  # both, if prctl failed
        time.sleep(1.0)
    server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
