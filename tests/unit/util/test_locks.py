"""The holder line of a lock file: written over the old one without an empty moment, and read
again while a new holder has not written it yet."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ctrain.util import locks


def test_a_new_holder_replaces_a_longer_old_line_whole(tmp_path: Path) -> None:
    fd = locks.open_lock(tmp_path / "x.lock")
    try:
        locks.write_holder(fd, "ctrain pull, pid 123456 on a-long-node-name, Slurm job 99999")
        locks.write_holder(fd, "ctrain pull, pid 7 on n1")
        assert (tmp_path / "x.lock").read_text() == "ctrain pull, pid 7 on n1\n"
        assert locks.read_holder(fd) == "ctrain pull, pid 7 on n1"
    finally:
        os.close(fd)


def test_only_the_first_line_is_the_holder(tmp_path: Path) -> None:
    (tmp_path / "x.lock").write_text("ctrain pull, pid 7 on n1\nleft over\n")
    fd = locks.open_lock(tmp_path / "x.lock")
    try:
        assert locks.read_holder(fd) == "ctrain pull, pid 7 on n1"
    finally:
        os.close(fd)


def test_a_holder_that_writes_late_is_still_named(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    fd = locks.open_lock(path)
    writer = locks.open_lock(path)
    started = threading.Event()

    def late() -> None:
        started.wait(timeout=10)
        locks.write_holder(writer, "ctrain pull, pid 42 on n2")

    thread = threading.Thread(target=late)
    thread.start()
    try:
        started.set()
        assert locks.wait_for_holder(fd, tries=500, pause=0.01) == "ctrain pull, pid 42 on n2"
    finally:
        thread.join(timeout=10)
        os.close(fd)
        os.close(writer)


def test_a_holder_that_never_writes_is_another_process(tmp_path: Path) -> None:
    fd = locks.open_lock(tmp_path / "x.lock")
    try:
        assert locks.wait_for_holder(fd, tries=3, pause=0.001) == "another process"
    finally:
        os.close(fd)
