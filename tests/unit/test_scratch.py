"""tests/support/scratch.py: which directories under /var/tmp are a killed run's, and their
removal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import scratch

HOST = scratch.FIRST_PID_NAMESPACE
SANDBOX = 4026532999
ALIVE = {(HOST, 100), (SANDBOX, 7)}


def test_a_directory_is_a_leftover_where_its_maker_is_gone_in_a_namespace_seen() -> None:
    names = [
        f"ctrain-cluster-pid{HOST}.100-abc",  # its maker runs
        f"ctrain-cluster-pid{HOST}.101-abc",  # gone
        f"ctrain-src-pid{SANDBOX}.7-abc",  # runs, in a sandbox
        f"ctrain-src-pid{SANDBOX}.8-abc",  # gone, from a sandbox that runs
        "ctrain-fresh-state-pid4026533000.1-abc",  # from a namespace no process is in
        "ctrain-cluster-abc",  # not named after its maker: someone else's
        f"other-pid{HOST}.101-abc",
        f"ctrain-cluster-pid{HOST}.101-",  # not mkdtemp's
    ]
    # The machine's first namespace sees every process: a namespace it does not see is gone.
    assert scratch.leftovers(names, ALIVE, sees_all=True) == [
        f"ctrain-cluster-pid{HOST}.101-abc",
        f"ctrain-src-pid{SANDBOX}.8-abc",
        "ctrain-fresh-state-pid4026533000.1-abc",
    ]
    # In a sandbox, a namespace it does not see may be the machine's, running.
    assert scratch.leftovers(names, {(SANDBOX, 7)}, sees_all=False) == [
        f"ctrain-src-pid{SANDBOX}.8-abc"
    ]


def test_a_dead_makers_directory_goes_and_a_live_ones_stays(tmp_path: Path) -> None:
    mine = scratch.make("mine", tmp_path)
    made = subprocess.run(
        [sys.executable, "-c", "from tests.support import scratch; import sys; "
         "print(scratch.make('dead', __import__('pathlib').Path(sys.argv[1])))", str(tmp_path)],
        capture_output=True, text=True, check=True, timeout=60, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    dead = Path(made.stdout.strip())
    (dead / "file").write_text("x")
    assert dead.name.startswith(f"ctrain-dead-pid{scratch.pid_namespace()}.")
    assert scratch.remove_leftovers(tmp_path) == [dead]
    assert not dead.exists() and mine.is_dir()
    assert mine.name == f"ctrain-mine-pid{scratch.pid_namespace()}.{os.getpid()}-{mine.name[-8:]}"


def test_a_directory_with_a_mount_inside_stays(tmp_path: Path) -> None:
    dead = tmp_path / f"ctrain-cluster-pid{scratch.pid_namespace()}.999999999-abc"
    (dead / "mnt").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(dead / "mnt")], check=True, timeout=30)
    try:
        assert scratch.remove_leftovers(tmp_path) == []
        assert (dead / "mnt").is_dir()
    finally:
        subprocess.run(["umount", str(dead / "mnt")], check=True, timeout=30)
    assert scratch.remove_leftovers(tmp_path) == [dead]
