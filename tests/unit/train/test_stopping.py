"""The signals that stop a training process: what each does (a truth table), the budget after
SIGTERM, a second SIGTERM or a SIGINT at once; then the same in a real process, signalled while
its main thread waits, without TensorFlow."""

from __future__ import annotations

import itertools
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctrain.errors import REQUEUE_EXIT_CODE
from ctrain.settings import resolve
from ctrain.train.stopping import SAME_SIGNAL, Action, Watcher, action, exit_code

TERM, USR2, INT = signal.SIGTERM, signal.SIGUSR2, signal.SIGINT


@pytest.mark.parametrize(
    ("signum", "terms_before", "expected"),
    [
        (USR2, 0, Action.STOP),
        (USR2, 1, Action.STOP),
        (USR2, 2, Action.STOP),
        (TERM, 0, Action.STOP_WITHIN_BUDGET),
        (TERM, 1, Action.END_NOW),
        (TERM, 2, Action.END_NOW),
        (INT, 0, Action.END_NOW),
        (INT, 1, Action.END_NOW),
        (INT, 2, Action.END_NOW),
    ],
)
def test_what_each_signal_does(signum: int, terms_before: int, expected: Action) -> None:
    assert action(signum, terms_before) is expected


@pytest.mark.parametrize(
    ("signum", "saved"), list(itertools.product((TERM, INT, USR2), (False, True)))
)
def test_exit_code(signum: int, saved: bool) -> None:
    assert exit_code(signum, saved) == (REQUEUE_EXIT_CODE if saved else 128 + signum)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watcher(budget: float = 25) -> tuple[Watcher, list[tuple[int, str]], Clock]:
    ended: list[tuple[int, str]] = []
    clock = Clock()
    return Watcher(budget, lambda code, text: ended.append((code, text)), clock), ended, clock


def test_usr2_starts_no_budget_and_never_ends_the_process() -> None:
    w, ended, _ = watcher()
    for _ in range(3):
        w.arrived(USR2)
    assert w.left() is None and ended == []


def test_the_first_sigterm_starts_the_budget() -> None:
    w, ended, clock = watcher(25)
    w.arrived(USR2)
    clock.now += 7
    w.arrived(TERM)
    assert w.left() == 25 and ended == []
    clock.now += 10
    assert w.left() == 15
    clock.now += 30
    assert w.left() == 0


@pytest.mark.parametrize(
    ("saved", "code", "words"),
    [
        (False, 128 + TERM, "no checkpoint was agreed"),
        (True, REQUEUE_EXIT_CODE, "the checkpoint is written"),
    ],
)
def test_a_spent_budget_ends_the_process(saved: bool, code: int, words: str) -> None:
    w, ended, _ = watcher(25)
    w.arrived(TERM)
    w.saved = saved
    w.spent()
    assert ended == [
        (code, f"ctrain: 25 s since SIGTERM (CTRAIN_STOP_BUDGET) and {words}: ending now")
    ]


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ((TERM, TERM), [(128 + TERM, "ctrain: got SIGTERM again: ending now")]),
        ((USR2, TERM, USR2, TERM), [(128 + TERM, "ctrain: got SIGTERM again: ending now")]),
        ((INT,), [(128 + INT, "ctrain: got SIGINT: ending now")]),
        ((USR2, INT), [(128 + INT, "ctrain: got SIGINT: ending now")]),
        ((TERM,), []),
        ((USR2, TERM, USR2), []),
    ],
)
def test_a_second_sigterm_or_a_sigint_ends_at_once(
    signals: tuple[int, ...], expected: list[tuple[int, str]]
) -> None:
    w, ended, clock = watcher()
    for signum in signals:
        w.arrived(signum)
        clock.now += SAME_SIGNAL
    assert ended == expected


def test_a_sigterm_delivered_twice_at_once_is_one() -> None:
    w, ended, clock = watcher()
    w.arrived(TERM)
    clock.now += SAME_SIGNAL / 2  # Slurm's to the training, then the runtime's passed on
    w.arrived(TERM)
    assert ended == [] and w.left() == 25 - SAME_SIGNAL / 2
    clock.now += SAME_SIGNAL / 2
    w.arrived(TERM)
    assert ended == [(128 + TERM, "ctrain: got SIGTERM again: ending now")]


def test_an_end_after_the_checkpoint_asks_for_the_requeue() -> None:
    w, ended, clock = watcher()
    w.arrived(TERM)
    w.saved = True
    clock.now += SAME_SIGNAL
    w.arrived(TERM)
    assert ended == [(REQUEUE_EXIT_CODE, "ctrain: got SIGTERM again: ending now")]


def test_run_reads_signal_numbers_until_the_socket_closes() -> None:
    w, ended, _ = watcher()
    reader, writer = socket.socketpair()
    writer.sendall(bytes([USR2, TERM, USR2]))
    writer.close()
    w.run(reader)
    assert w.terms == 1 and ended == []


def test_run_ends_the_process_when_the_budget_is_spent() -> None:
    w, ended, _ = watcher(0)  # the fake clock stands still: 0 s left once SIGTERM came
    reader, writer = socket.socketpair()
    writer.sendall(bytes([TERM]))
    w.run(reader)
    assert [code for code, _ in ended] == [128 + TERM]
    writer.close()


def test_the_budget_setting() -> None:
    assert resolve({}, {}, "/").stop_budget == 25
    assert resolve({}, {"CTRAIN_STOP_BUDGET": "90"}, "/").stop_budget == 90


# ---- a real process: its main thread waits (as in a collective) while the signals come -------

WAITER = textwrap.dedent(
    """
    import sys, threading
    from ctrain.train.stopping import STOP
    STOP.install(float(sys.argv[1]))
    if sys.argv[2] == "saved":
        STOP.saved()
    print("ready", flush=True)
    threading.Event().wait()
    """
)


def start(tmp_path: Path, budget: float, saved: bool = False) -> subprocess.Popen[str]:
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(budget), "saved" if saved else "-"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    return proc


def ended(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err


@pytest.mark.timeout(120)
def test_a_real_process_ends_at_its_budget(tmp_path: Path) -> None:
    proc = start(tmp_path, 1)
    proc.send_signal(TERM)
    code, err = ended(proc)
    assert code == 128 + TERM, err
    assert "got SIGTERM: finishing this step" in err
    assert "1 s since SIGTERM (CTRAIN_STOP_BUDGET) and no checkpoint was agreed" in err


@pytest.mark.timeout(120)
def test_a_real_process_saved_ends_at_its_budget_asking_for_the_requeue(tmp_path: Path) -> None:
    proc = start(tmp_path, 1, saved=True)
    proc.send_signal(TERM)
    code, err = ended(proc)
    assert code == REQUEUE_EXIT_CODE, err


@pytest.mark.timeout(120)
def test_a_real_process_ends_at_the_second_sigterm(tmp_path: Path) -> None:
    proc = start(tmp_path, 3600)  # the budget cannot be what ends it
    proc.send_signal(TERM)
    assert proc.stderr is not None
    assert "got SIGTERM: finishing this step" in proc.stderr.readline()
    # One sooner than SAME_SIGNAL after the watcher read the first is that one delivered twice;
    # the watcher's thread may read them late on a loaded machine, so another comes each time.
    for _ in range(20):
        time.sleep(SAME_SIGNAL)
        if proc.poll() is not None:
            break
        proc.send_signal(TERM)
    code, err = ended(proc)
    assert code == 128 + TERM and "got SIGTERM again: ending now" in err, err


@pytest.mark.timeout(120)
def test_a_real_process_ends_at_sigint(tmp_path: Path) -> None:
    proc = start(tmp_path, 3600)
    proc.send_signal(INT)
    code, err = ended(proc)
    assert code == 128 + INT and "got SIGINT: ending now" in err, err


FORKER = textwrap.dedent(
    """
    import os, signal
    from ctrain.train.stopping import STOP
    STOP.install(3600)
    if os.fork() == 0:  # a data loader's worker, say: Slurm signals it with its parent
        print(signal.set_wakeup_fd(-1), flush=True)  # the descriptor it would write to
        os._exit(0)
    os.wait()
    print(signal.set_wakeup_fd(-1) >= 0, flush=True)
    """
)


def test_a_forked_child_does_not_write_to_its_parents_watcher(tmp_path: Path) -> None:
    script = tmp_path / "forker.py"
    script.write_text(FORKER)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["-1", "True"], done.stderr
