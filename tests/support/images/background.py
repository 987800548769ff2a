"""The slow builds of a test run, done once each and, where the run asks, in the background.

A build is a function decorated with ``once``: its first call runs it, every later call (from any
thread) gets the same result, or the same failure, without running it again; a call made while
another thread runs it waits for that run. ``start(lanes)`` runs lanes of builds in background
threads, each lane's builds in order, while the tests that need none of them run: a test then
calls the build as it always does and finds it done, or waits for it. A test module run alone
starts nothing and builds what it calls, as before.

The processes of the builds go through ``run``: in a background lane they run under ``nice``, so
a test's own processes keep the CPU they ask for (the work a build hands to the Docker daemon
runs at the daemon's priority); ``stop()`` ends every process still running, so a run that ends
early (a failure with ``-x``, Ctrl-C) leaves no build behind.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")
NICE = 10  # a background build's niceness: below the tests', above nothing else

_local = threading.local()  # .background: this thread runs a lane
_processes: set[subprocess.Popen[str]] = set()
_processes_lock = threading.Lock()
_threads: list[threading.Thread] = []
_log: list[str] = []  # what each lane's build took, and each wait of a test for a build
_started = time.monotonic()


def once(fn: Callable[P, T]) -> Callable[P, T]:
    """``fn`` memoised on its arguments, failures included, and safe to call from threads: one
    call runs it for given arguments, the others wait for that call and share its outcome."""
    outcomes: dict[Hashable, tuple[bool, object]] = {}
    locks: dict[Hashable, threading.Lock] = {}
    guard = threading.Lock()

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        key = (args, tuple(sorted(kwargs.items())))
        with guard:
            lock = locks.setdefault(key, threading.Lock())
        t0 = time.monotonic()
        with lock:
            waited = time.monotonic() - t0
            if waited > 1 and not getattr(_local, "background", False):
                _log.append(f"{fn.__name__}{args}: a test waited {waited:.0f} s for it")
            if key not in outcomes:
                try:
                    outcomes[key] = (True, fn(*args, **kwargs))
                except Exception as error:  # shared with every later caller; an interrupt is not
                    outcomes[key] = (False, error)
        ok, value = outcomes[key]
        if not ok:
            assert isinstance(value, Exception)
            raise value
        return value  # type: ignore[return-value]

    return wrapper


def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    input: str | None = None,  # noqa: A002 - subprocess.run's name
) -> subprocess.CompletedProcess[str]:
    """``argv`` to its end (text, output captured), in a process group of its own that ``stop``
    can end; under ``nice`` when called from a background lane."""
    if getattr(_local, "background", False):
        argv = ["nice", "-n", str(NICE), *argv]
    process = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    with _processes_lock:
        _processes.add(process)
    try:
        stdout, stderr = process.communicate(input, timeout=timeout)
    except BaseException:
        _kill(process)
        raise
    finally:
        with _processes_lock:
            _processes.discard(process)
    return subprocess.CompletedProcess(list(argv), process.returncode, stdout, stderr)


def _kill(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _lane(builds: Sequence[Callable[[], object]]) -> None:
    _local.background = True
    for build in builds:
        t0 = time.monotonic()
        try:
            build()
            outcome = "done"
        except Exception:  # kept by ``once``: the test that calls the build fails with it
            outcome = "failed"
        _log.append(
            f"{build.__name__}: {outcome} in the background in {time.monotonic() - t0:.0f} s, "
            f"{time.monotonic() - _started:.0f} s into the run"
        )


def start(lanes: Sequence[Sequence[Callable[[], object]]]) -> None:
    """Each lane in a daemon thread of its own, its builds one after the other."""
    for builds in lanes:
        thread = threading.Thread(target=_lane, args=(builds,), daemon=True)
        thread.start()
        _threads.append(thread)


def stop() -> None:
    """End every build process still running."""
    with _processes_lock:
        running = list(_processes)
    for process in running:
        _kill(process)


def report() -> list[str]:
    """What each lane's build took and when it was done, and how long tests waited for one."""
    return list(_log)
