"""util/fs.py: a target appears whole or not at all, whatever happens inside the block; free
space and sizes."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ctrain.errors import ConfigError
from ctrain.util import fs

WEIRD = ["plain", "with space", "quote'and\"double", "new\nline", "colon:comma,", "ünï"]


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize("name", WEIRD)
def test_atomic_puts_the_file_in_place(tmp_path: Path, name: str) -> None:
    target = tmp_path / name
    target.write_text("old")
    with fs.atomic(target) as temp:
        assert temp.parent == tmp_path and temp.name.startswith(f".{name}.tmp-")
        temp.write_text("new")
        assert target.read_text() == "old"  # nothing visible before the block ends
    assert target.read_text() == "new"
    assert names(tmp_path) == [name]


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_an_exception_leaves_the_target_and_no_temporary(
    tmp_path: Path, error: BaseException
) -> None:
    (tmp_path / "kept").write_text("old")
    for name in ("kept", "absent"):
        with pytest.raises(type(error)), fs.atomic(tmp_path / name) as temp:
            temp.write_text("half")
            raise error
    assert names(tmp_path) == ["kept"]
    assert (tmp_path / "kept").read_text() == "old"


def test_a_directory_is_placed_whole_or_removed(tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    with fs.atomic(target) as temp:
        temp.mkdir()
        (temp / "sub").mkdir()
        (temp / "sub" / "a").write_text("a")
    assert (target / "sub" / "a").read_text() == "a"
    with pytest.raises(OSError), fs.atomic(tmp_path / "other") as temp:
        temp.mkdir()
        (temp / "b").write_text("b")
        raise OSError("disk full")
    assert names(tmp_path) == ["ckpt"]


def test_no_replace_refuses_an_existing_target(tmp_path: Path) -> None:
    target = tmp_path / "overlay.img"
    with fs.atomic(target, replace=False) as temp:
        temp.write_text("first")
    with pytest.raises(FileExistsError), fs.atomic(target, replace=False) as temp:
        temp.write_text("second")
    assert target.read_text() == "first"
    assert names(tmp_path) == ["overlay.img"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_writer_leaves_the_old_target_and_a_leftover_the_next_one_removes(
    tmp_path: Path, signum: signal.Signals
) -> None:
    target = tmp_path / "out.json"
    target.write_text("old")
    script = textwrap.dedent(
        """
        import sys, time
        from pathlib import Path
        from ctrain.util import fs
        with fs.atomic(Path(sys.argv[1])) as temp:
            temp.write_text("half")
            print("inside", flush=True)
            time.sleep(60)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None and child.stdout.readline() == "inside\n"
    child.send_signal(signum)
    assert child.wait(timeout=30) == -signum
    assert target.read_text() == "old"
    (leftover,) = [p for p in tmp_path.iterdir() if p != target]
    assert fs.remove_leftovers(tmp_path, fs.temp_prefix(target, "tmp")) == [leftover]
    assert names(tmp_path) == ["out.json"]


def test_remove_leftovers_takes_only_its_prefix(tmp_path: Path) -> None:
    for name in (".x.sif.pull-1-aa", ".x.sif.pull-2-bb", ".y.sif.pull-1", "x.sif", "x.sif.json"):
        (tmp_path / name).write_text("")
    (tmp_path / ".x.sif.pull-3-cc").mkdir()
    removed = fs.remove_leftovers(tmp_path, fs.temp_prefix(tmp_path / "x.sif", "pull"))
    assert [p.name for p in removed] == [".x.sif.pull-1-aa", ".x.sif.pull-2-bb", ".x.sif.pull-3-cc"]
    assert names(tmp_path) == [".y.sif.pull-1", "x.sif", "x.sif.json"]
    assert fs.remove_leftovers(tmp_path / "missing", ".x") == []


def test_write_text(tmp_path: Path) -> None:
    fs.write_text(tmp_path / "a.json", "{}\n")
    fs.write_text(tmp_path / "a.json", "[]\n")
    assert (tmp_path / "a.json").read_text() == "[]\n"
    assert names(tmp_path) == ["a.json"]


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"), (64 * 1024**2, "64.0 MiB"),
     (15 * 1024**3, "15.0 GiB"), (3 * 1024**4, "3.0 TiB"), (2048 * 1024**4, "2048.0 TiB")],
)  # fmt: skip
def test_human(size: int, text: str) -> None:
    assert fs.human(size) == text


def test_free_bytes_uses_nearest_existing_parent(tmp_path: Path) -> None:
    assert fs.nearest_existing(tmp_path / "not" / "yet") == tmp_path
    assert fs.free_bytes(tmp_path / "not" / "yet") == fs.free_bytes(tmp_path) > 0


def test_check_free(tmp_path: Path) -> None:
    assert fs.check_free(tmp_path / "cache", 0) > 0
    with pytest.raises(ConfigError) as raised:
        fs.check_free(tmp_path / "cache", 10**9)
    message = raised.value.message
    assert str(tmp_path / "cache") in message
    assert "1000000000 GiB needed" in message
    assert f"only {fs.human(fs.free_bytes(tmp_path))} free" in message
    assert "CTRAIN_CACHE_DIR" in raised.value.fix
    with pytest.raises(ConfigError) as raised:
        fs.check_free(tmp_path, 10**9, "pull elsewhere with -o")
    assert raised.value.fix == "pull elsewhere with -o"


def test_scratch_is_private_and_gone_however_the_block_ends(tmp_path: Path) -> None:
    with fs.scratch(tmp_path, "tool-") as made:
        assert made.parent == tmp_path and made.name.startswith("tool-")
        assert made.stat().st_mode & 0o777 == 0o700
        locked = made / "build-temp-1" / "rootfs"
        locked.mkdir(parents=True)
        (locked / "file").write_text("x")
        locked.chmod(0o500)  # what a stopped tool leaves: a read-only extracted root
        locked.parent.chmod(0o500)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError), fs.scratch(tmp_path, "tool-") as made:
        (made / "partial").write_text("x")
        raise RuntimeError("stopped")
    assert list(tmp_path.iterdir()) == []
    with fs.scratch(tmp_path, "tool-") as one, fs.scratch(tmp_path, "tool-") as two:
        assert one != two


def test_a_failed_write_is_the_file_access_error_of_readmes_table(tmp_path: Path) -> None:
    full = fs.write_error(OSError(errno.ENOSPC, "No space left"), tmp_path / "x.sif", "free some")
    denied = fs.write_error(OSError(errno.EACCES, "Permission denied"), tmp_path / "x.sif", "-")
    assert (full.exit_code, denied.exit_code) == (7, 7)
    assert (full.message, full.fix) == (f"no space left in {tmp_path} for x.sif", "free some")
    assert denied.line() == (
        f"ctrain: error: cannot write {tmp_path / 'x.sif'}: Permission denied "
        "Fix: check the directory"
    )
