"""The only module that starts processes: run and capture, check, spawn, or replace this process.

subprocess, threading and shlex are imported by the functions that use them, shutil not at all:
`ctrain launch` needs only ``which`` and ``exec_replace`` and starts at Click's speed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, NoReturn

from ctrain.errors import ExternalToolError, Interrupted

if TYPE_CHECKING:
    import subprocess


def which(program: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Full path of ``program`` on ``PATH`` (of ``environ`` when given), or None.

    shutil.which's search (empty PATH entries skipped), written out: shutil imports compression
    modules that would cost `ctrain launch` a tenth of its start-up."""
    path = (os.environ if environ is None else environ).get("PATH", os.defpath)
    dirs = [entry for entry in path.split(os.pathsep) if entry]
    for candidate in [program] if os.sep in program else [os.path.join(d, program) for d in dirs]:
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


def _not_found(program: str, exc: OSError) -> ExternalToolError:
    return ExternalToolError(
        f"{program} not found", f"install it or put it on PATH ({exc.strerror})"
    )


def run(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float | None = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to completion, capturing text output. A missing program is an error."""
    import subprocess

    try:
        return subprocess.run(
            list(argv),
            env=None if env is None else dict(env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise _not_found(argv[0], exc) from exc
    except subprocess.TimeoutExpired as exc:
        raise ExternalToolError(
            f"{' '.join(argv)} did not finish within {timeout} s", "check that it is not hanging"
        ) from exc


def run_within(
    argv: Sequence[str], env: Mapping[str, str] | None, timeout: float
) -> tuple[int | None, str]:
    """Run ``argv`` with its stdout captured and its stderr passed through to ours. Its exit code
    and stdout; past ``timeout`` seconds it is killed: None and the stdout it wrote until then."""
    import subprocess

    try:
        done = subprocess.run(
            list(argv),
            env=None if env is None else dict(env),
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise _not_found(argv[0], exc) from exc
    except subprocess.TimeoutExpired as exc:
        return None, (exc.stdout or b"").decode(errors="replace")
    return done.returncode, done.stdout.decode(errors="replace")


def attached(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run ``argv`` on this process's stdout and stderr (no stdin), as long as it runs; its
    exit code. For a command whose output is the user's to read as it comes (``ssh`` to the
    cluster's ctrain)."""
    import subprocess

    try:
        return subprocess.run(
            list(argv), env=None if env is None else dict(env), stdin=subprocess.DEVNULL
        ).returncode
    except FileNotFoundError as exc:
        raise _not_found(argv[0], exc) from exc


TAIL_LINES = 40  # of a tool's output, kept to show or quote when it fails


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped ("" when there is none)."""
    return ([line.strip() for line in text.splitlines() if line.strip()] or [""])[-1]


def failure(done: subprocess.CompletedProcess[str]) -> str:
    """What a failed run said last (stderr, else stdout), or its exit code."""
    return last_line(done.stderr or done.stdout) or f"exit code {done.returncode}"


def check(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float | None = 60,
    *,
    what: str = "",
    fix: str = "",
) -> str:
    """Run ``argv`` and return its stdout. A non-zero exit is an ExternalToolError
    ``<what> failed: <its last line>`` (``what`` defaults to the program) with ``fix``
    (default: run it by hand)."""
    done = run(argv, env, timeout)
    if done.returncode != 0:
        import shlex

        raise ExternalToolError(
            f"{what or argv[0]} failed: {failure(done)}",
            fix or f"run it by hand: {shlex.join(argv)}",
        )
    return done.stdout


def exec_replace(argv: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with ``argv`` (same pid, so Slurm's signals reach it)."""
    if not argv:
        raise ExternalToolError("no command to run", "give the command after --")
    program = argv[0]
    if os.sep not in program and which(program, env) is None:
        raise ExternalToolError(f"{program} not found on PATH", "install it or give its full path")
    try:
        os.execvpe(program, list(argv), dict(env))
    except OSError as exc:
        raise ExternalToolError(
            f"cannot run {program}: {exc.strerror}", "check the command"
        ) from exc


def spawn_detached(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session, its standard streams closed: it outlives an exec of
    this process and holds no launcher's output pipe open."""
    import subprocess

    try:
        return subprocess.Popen(
            list(argv),
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except FileNotFoundError as exc:
        raise _not_found(argv[0], exc) from exc


def _start_lines(argv: Sequence[str], env: Mapping[str, str] | None) -> subprocess.Popen[str]:
    """Start ``argv`` with stdout and stderr merged into one line-buffered text pipe."""
    import subprocess

    try:
        return subprocess.Popen(
            list(argv),
            env=None if env is None else dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
    except FileNotFoundError as exc:
        raise _not_found(argv[0], exc) from exc


def stream(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    on_line: Callable[[str], None],
    timeout: float | None = None,
) -> int:
    """Run ``argv`` with stdout and stderr merged, handing each line to ``on_line`` as it comes;
    return the exit code. Past ``timeout`` seconds it is sent SIGTERM (srun passes it to the
    tasks), then SIGKILL 15 s later, and the run counts as failed."""
    import subprocess
    import threading

    proc = _start_lines(argv, env)
    expired = threading.Event()

    def stop() -> None:
        expired.set()
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
            return
        proc.kill()

    timer = threading.Timer(timeout, stop) if timeout else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            on_line(line)
        code = proc.wait()
    finally:
        if timer is not None:
            timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if expired.is_set():
        raise ExternalToolError(
            f"{' '.join(argv[:3])}... did not finish within {timeout} s", "give it more time"
        )
    return code


STOP_GRACE = 60.0
"""Seconds a child that was passed SIGTERM/SIGINT/SIGHUP gets to clean up before SIGKILL."""


def stream_forwarding(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    on_line: Callable[[str], None],
    grace: float = STOP_GRACE,
) -> tuple[int, str | None]:
    """``stream`` for a child that must clean up when stopped (``apptainer pull`` and
    ``build`` remove their ``build-temp-*`` on SIGINT/SIGTERM, not on SIGKILL): SIGTERM,
    SIGINT and SIGHUP sent to ctrain are passed to the child, ctrain waits for it to exit, and
    SIGKILLs it only ``grace`` seconds after the first signal. Returns (exit code, the name of
    the signal that stopped it or None). Signals are forwarded from the main thread only."""
    import signal
    import threading

    received: list[signal.Signals] = []
    children: list[subprocess.Popen[str]] = []  # the child, once started

    def kill() -> None:
        for child in children:
            child.kill()

    killer = threading.Timer(grace, kill)
    killer.daemon = True

    def forward(signum: int, frame: object) -> None:
        if not received:
            killer.start()
        received.append(signal.Signals(signum))
        for child in children:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)

    wanted = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    in_main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, forward) for sig in wanted} if in_main else {}
    try:
        code = _wait_forwarded(argv, env, on_line, children, received)
    finally:
        killer.cancel()
        for sig, old in previous.items():
            signal.signal(sig, old)
    return code, received[0].name if received else None


def stream_to_end(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    on_line: Callable[[str], None],
    *,
    what: str,
    untouched: str,
    again: str,
) -> tuple[int, str]:
    """``stream_forwarding`` for a step that writes one thing (a pull, a build): its exit code
    and the last ``TAIL_LINES`` lines it said; a signal that stopped it raises Interrupted
    ("WHAT stopped by SIGNAL; UNTOUCHED", fix ``again``)."""
    from collections import deque

    said: deque[str] = deque(maxlen=TAIL_LINES)

    def keep(line: str) -> None:
        said.append(line)
        on_line(line)

    code, stopped = stream_forwarding(argv, env, keep)
    if stopped is not None:
        raise Interrupted(f"{what} stopped by {stopped}; {untouched}", again)
    return code, "".join(said)


def _wait_forwarded(
    argv: Sequence[str],
    env: Mapping[str, str] | None,
    on_line: Callable[[str], None],
    children: list[subprocess.Popen[str]],
    received: Sequence[int],
) -> int:
    """Start ``argv`` into ``children`` (signals that came before are passed on now), stream
    its lines, and wait for it."""

    child = _start_lines(argv, env)
    children.append(child)
    for signum in list(received):
        child.send_signal(signum)
    try:
        assert child.stdout is not None
        for line in child.stdout:
            on_line(line)
        return child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
