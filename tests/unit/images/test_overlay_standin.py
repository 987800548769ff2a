"""Overlay locks end to end: ``ctrain exec --overlay`` through the Apptainer stand-in, which takes
Apptainer's fcntl locks itself. ctrain takes the same lock before it execs the runtime and
holds it across the exec, so what Apptainer would refuse is refused first, with the reason."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import fake_apptainer
from tests.helpers import run_ctrain, sandbox, start_ctrain, wait_for


class Box:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = tmp / "calls.jsonl"
        self.env = sandbox(tmp, FAKE_APPTAINER_LOG=str(self.log), CTRAIN_LAUNCH="false").env
        fake_apptainer.install(tmp / "bin")
        self.image = tmp / "img.sif"
        fake_apptainer.make_sif(self.image, {"PATH": fake_apptainer.DEFAULT_PATH})
        self.overlay = tmp / "o.img"
        made = run_ctrain("overlay", "create", str(self.overlay), "--size", "64M", env=self.env)
        assert made.returncode == 0, made.stderr

    def execs(self) -> int:
        return sum(1 for c in fake_apptainer.calls(self.log) if c.get("argv", [""])[0] == "exec")


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


@pytest.fixture
def holders(box: Box) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.terminate()
        process.communicate(timeout=60)


def hold(box: Box, holders: list[subprocess.Popen[str]], spec: str, via_ctrain: bool) -> int:
    """A container using the overlay ``spec`` until the test ends; its pid."""
    marker = box.tmp / f"started-{len(holders)}"
    command = ["sh", "-c", f"touch {marker}; exec sleep 120"]
    if via_ctrain:
        running = start_ctrain(
            "exec", "--runtime", "apptainer", "--overlay", spec, str(box.image), "--",
            *command, env=box.env, cwd=box.tmp,
        )  # fmt: skip
    else:
        running = subprocess.Popen(
            [str(box.tmp / "bin" / "apptainer"), "exec", "--overlay", spec, str(box.image),
             *command],
            env=box.env, cwd=box.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
    holders.append(running)
    wait_for(marker.exists, f"the container using {spec}", 60)
    return running.pid


def try_exec(box: Box, spec: str) -> subprocess.CompletedProcess[str]:
    return run_ctrain(
        "exec", "--runtime", "apptainer", "--overlay", spec, str(box.image), "--", "true",
        env=box.env, cwd=box.tmp,
    )  # fmt: skip


def test_a_reader_is_refused_while_ctrain_runs_a_writer(
    box: Box, holders: list[subprocess.Popen[str]]
) -> None:
    pid = hold(box, holders, str(box.overlay), via_ctrain=True)  # ctrain execs: the same pid
    done = try_exec(box, f"{box.overlay}:ro")
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip() == (
        f"ctrain: error: overlay {box.overlay} is in use read-write by pid {pid}; Apptainer "
        "refuses a read-only mount while a writer runs Fix: wait for that job to end, or give "
        "this one its own overlay (ctrain overlay create)"
    )
    assert box.execs() == 1  # refused before apptainer was started


def test_a_writer_is_refused_while_apptainer_itself_has_a_reader(
    box: Box, holders: list[subprocess.Popen[str]]
) -> None:
    pid = hold(box, holders, f"{box.overlay}:ro", via_ctrain=False)
    done = try_exec(box, str(box.overlay))
    assert done.returncode == 4
    assert f"in use read-only by pid {pid} (maybe more); Apptainer refuses a writer" in done.stderr
    assert f"Fix: mount it read-only as well (--overlay {box.overlay}:ro)" in done.stderr
    assert box.execs() == 1


def test_readers_share_an_overlay(box: Box, holders: list[subprocess.Popen[str]]) -> None:
    hold(box, holders, f"{box.overlay}:ro", via_ctrain=True)
    done = try_exec(box, f"{box.overlay}:ro")
    assert done.returncode == 0, done.stderr
    assert box.execs() == 2
