"""overlay.py: sizes, inode counts, argv, refusals (one line, nothing written), creation by
ctrain itself with apptainer on PATH (dumpe2fs), and Apptainer's fcntl lock between real
processes (many readers or one writer, held across exec)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain.errors import ConfigError, ExternalToolError, LaunchError
from ctrain.images import overlay
from tests.support import fake_apptainer
from tests.support.helpers import need, run_ctrain, wait_for

MIB = 1024**2
GIB = 1024**3
WEIRD = ["plain", "with space", "quote'and\"double", "new\nline", "colon:comma,"]


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("15G", 15 * GIB),
        ("15g", 15 * GIB),
        ("15GiB", 15 * GIB),
        ("15GB", 15 * GIB),
        ("512M", 512 * MIB),
        ("64M", 64 * MIB),
        ("1T", 1024 * GIB),
        ("1.5G", 1536 * MIB),
        ("1024", 1024 * MIB),
        ("65536K", 64 * MIB),
        ("65537K", 65 * MIB),  # rounded up to whole MiB
        (" 100 M ", 100 * MIB),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert overlay.parse_size(text) == size


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "is not a size"),
        ("G", "is not a size"),
        ("15X", "is not a size"),
        ("-1G", "is not a size"),
        ("15 G B", "is not a size"),
        ("1e3M", "is not a size"),
        ("63M", "below the minimum of 64M"),
        ("0", "below the minimum"),
        ("17T", "above ext3's 16T"),
    ],
)
def test_parse_size_refuses(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        overlay.parse_size(text)
    assert words in info.value.message and info.value.fix


@pytest.mark.parametrize(
    ("text", "count"), [("500K", 500_000), ("2M", 2_000_000), ("100000", 100_000), ("64", 64)]
)
def test_parse_inodes(text: str, count: int) -> None:
    assert overlay.parse_inodes(text) == count


@pytest.mark.parametrize("text", ["", "lots", "5KiB", "-5", "63", "1G"])
def test_parse_inodes_refuses(text: str) -> None:
    with pytest.raises(ConfigError):
        overlay.parse_inodes(text)


@pytest.mark.parametrize("name", WEIRD)
def test_argv_golden(name: str) -> None:
    path = Path("/scratch") / name / "o.img"
    stage = Path("/tmp") / name
    assert overlay.mkfs_argv("/usr/sbin/mkfs.ext3", path, stage, None, 1000, 100, True) == [
        "/usr/sbin/mkfs.ext3", "-q", "-m", "0", "-d", str(stage),
        "-E", "root_owner=1000:100", str(path),
    ]  # fmt: skip
    assert overlay.mkfs_argv("mkfs.ext3", path, stage, 500_000, 0, 0, False) == [
        "mkfs.ext3", "-q", "-m", "0", "-d", str(stage),
        "-E", "root_owner=0:0,nodiscard", "-N", "500000", str(path),
    ]  # fmt: skip


def which_of(*present: str):  # type: ignore[no-untyped-def]
    return lambda name: f"/bin/{name}" if name in present else None


def test_plan_uses_mkfs_even_with_apptainer_on_path(tmp_path: Path) -> None:
    target = str(tmp_path / "o.img")
    plan = overlay.plan_create(target, "1G", None, True, which_of("apptainer", "mkfs.ext3"))
    assert (plan.program, plan.size, plan.sparse) == ("/bin/mkfs.ext3", GIB, True)
    with pytest.raises(ExternalToolError) as info:
        overlay.plan_create(target, "1G", None, True, which_of("apptainer"))
    assert "install e2fsprogs" in info.value.fix


def test_tool_finder_looks_in_sbin() -> None:
    in_sbin = Path("/usr/sbin/mkfs.ext3").exists() or Path("/sbin/mkfs.ext3").exists()
    need(in_sbin, "no mkfs.ext3 in sbin (make system)")
    assert overlay.tool_finder({"PATH": "/nonexistent"})("mkfs.ext3") is not None


# -- the CLI: refusals and creation with the fake apptainer -------------------------------------


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    return fake_apptainer.with_standin(tmp_path).env


def overlay_create(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_ctrain("overlay", "create", *args, env=env, cwd=cwd, timeout=120)


def listing(directory: Path) -> dict[str, tuple[int, float]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime)
        for p in sorted(directory.rglob("*"))
    }


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["existing.img", "--size", "1G"], "already exists Fix: choose a new path"),
        (["o.img", "--size", "10M"], "below the minimum of 64M"),
        (["o.img", "--size", "15X"], "--size '15X' is not a size Fix: write it like 15G"),
        (["o.img", "--size", ""], "is not a size"),
        (["o.img"], "needs --size"),
        ([], "needs a PATH"),
        (["", "--size", "1G"], "is not usable"),
        (["o.img", "--size", "1G", "--inodes", "ten"], "--inodes 'ten' is not a count"),
        (["o.img", "--size", "1G", "--inodes", "10"], "below 64"),
        (["o.img", "--size", "64M", "--inodes", "1M"], "does not fit in 64.0 MiB"),
        (["no/such/dir/o.img", "--size", "1G"], "does not exist Fix: create it first"),
        (["o.img", "--size", "16T"], "not enough free space"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(
    tmp_path: Path, cli_env: dict[str, str], args: list[str], words: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "existing.img").write_bytes(b"keep me")
    before = listing(work)
    done = overlay_create(cli_env, work, *args)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctrain: error: ") and " Fix: " in lines[0]
    assert words in lines[0]
    assert listing(work) == before
    assert (work / "existing.img").read_bytes() == b"keep me"
    assert fake_apptainer.calls(tmp_path / "calls.jsonl") == []


def e2fs_tool(name: str) -> str:
    found = overlay.tool_finder(os.environ)(name)
    need(found is not None, f"no {name} (make system)")
    assert found is not None
    return found


def dumpe2fs(image: Path) -> dict[str, str]:
    out = subprocess.run(
        [e2fs_tool("dumpe2fs"), "-h", str(image)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


@pytest.mark.parametrize("sparse", [True, False])
def test_create_with_apptainer_on_path_is_ctrains_ext3_without_reserved_blocks(
    tmp_path: Path, cli_env: dict[str, str], sparse: bool
) -> None:
    """apptainer overlay create would reserve 5% for root (and write every byte without
    --sparse): ctrain makes the image itself, apptainer on PATH or not."""
    target = tmp_path / "my overlay.img"
    flags = ["--sparse"] if sparse else []
    done = overlay_create(cli_env, tmp_path, str(target), "--size", "256M", *flags)
    assert done.returncode == 0, done.stderr
    assert fake_apptainer.calls(tmp_path / "calls.jsonl") == []
    header = dumpe2fs(target)
    assert header["Reserved block count"] == "0"
    assert "has_journal" in header["Filesystem features"]
    assert "extent" not in header["Filesystem features"]
    assert target.stat().st_size == 256 * MIB
    allocated = target.stat().st_blocks * 512
    assert (allocated < 64 * MIB) if sparse else (allocated >= 256 * MIB)
    sparse_word = ", sparse" if sparse else ""
    assert done.stdout.strip() == (
        f"created {target}: 256.0 MiB ext3 overlay{sparse_word}, no reserved blocks"
    )


def test_mkfs_failure_leaves_nothing(tmp_path: Path, cli_env: dict[str, str]) -> None:
    broken = tmp_path / "bin" / "mkfs.ext3"
    broken.write_text("#!/bin/sh\necho 'mkfs.ext3: Device size reported to be zero' >&2\nexit 1\n")
    broken.chmod(0o755)
    done = overlay_create(cli_env, tmp_path, "o.img", "--size", "64M")
    assert done.returncode == 5
    assert "mkfs.ext3 failed: mkfs.ext3: Device size reported to be zero" in done.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".o.img", "o.img"))]


# -- the lock Apptainer takes ---------------------------------------------------------------------

HOLD_THEN_EXEC = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from ctrain.images import overlay
    fd = overlay.lock_overlay(Path(sys.argv[1]), sys.argv[2] == "ro")
    print(fd, flush=True)
    os.execvp("sleep", ["sleep", "120"])
    """
)


@pytest.fixture
def overlay_file(tmp_path: Path) -> Path:
    path = tmp_path / "o.img"
    path.write_bytes(b"\0" * 4096)
    return path


@contextlib.contextmanager
def holder(path: Path, mode: str) -> Iterator[int]:
    """Another process holding ``path``'s lock (``ro`` or ``rw``) after an exec; its pid."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD_THEN_EXEC, str(path), mode], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip().isdigit()
        wait_for(
            lambda: Path(f"/proc/{child.pid}/comm").read_text().strip() == "sleep",
            timeout=30,
            what="the holder to exec",
        )
        yield child.pid
    finally:
        child.kill()
        child.wait(timeout=30)


def refused(path: Path, readonly: bool) -> LaunchError:
    with pytest.raises(LaunchError) as info:
        overlay.lock_overlay(path, readonly)
    assert info.value.exit_code == 4 and "\n" not in info.value.line()
    return info.value


def test_a_writer_excludes_a_second_writer_and_readers_across_its_exec(overlay_file: Path) -> None:
    with holder(overlay_file, "rw") as pid:
        error = refused(overlay_file, readonly=False)
        assert error.message == (
            f"overlay {overlay_file} is in use read-write by pid {pid}; "
            "Apptainer allows one writer at a time"
        )
        assert "its own overlay" in error.fix and ":ro" not in error.fix
        error = refused(overlay_file, readonly=True)
        assert error.message == (
            f"overlay {overlay_file} is in use read-write by pid {pid}; "
            "Apptainer refuses a read-only mount while a writer runs"
        )
        assert "wait for that job to end" in error.fix
    fd = overlay.lock_overlay(overlay_file, readonly=False)
    assert fd is not None
    try:
        assert os.get_inheritable(fd)
    finally:
        os.close(fd)
    assert sorted(p.name for p in overlay_file.parent.iterdir()) == ["o.img"]  # no lock file


def test_readers_share_and_exclude_a_writer(overlay_file: Path) -> None:
    overlay_file.chmod(0o444)  # a reader needs only read access
    with holder(overlay_file, "ro") as pid:
        fd = overlay.lock_overlay(overlay_file, readonly=True)
        assert fd is not None
        os.close(fd)
        overlay_file.chmod(0o644)
        error = refused(overlay_file, readonly=False)
        assert error.message.startswith(f"overlay {overlay_file} is in use read-only by pid {pid}")
        assert "Apptainer refuses a writer while readers use it" in error.message
        assert f"--overlay {overlay_file}:ro" in error.fix


def test_two_names_of_one_overlay_share_the_lock(overlay_file: Path) -> None:
    link = overlay_file.parent / "link.img"
    link.symlink_to(overlay_file)
    with holder(link, "rw"):
        assert "in use read-write" in refused(overlay_file, readonly=True).message


def test_no_lock_support_is_skipped_silently(
    overlay_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_locks(fd: int, cmd: int) -> None:
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(overlay.fcntl, "lockf", no_locks)
    assert overlay.lock_overlay(overlay_file, readonly=False) is None


def test_a_missing_or_unwritable_overlay_is_refused_with_the_reason(tmp_path: Path) -> None:
    error = refused(tmp_path / "none.img", readonly=True)
    assert error.message.startswith(f"cannot open overlay {tmp_path / 'none.img'} to read:")
