"""overlay.py: sizes, inode counts, argv, refusals (one line, nothing written), creation with the
fake apptainer, and the read-write lock between processes (held across exec, named, :ro)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain.errors import ConfigError, ExternalToolError, LaunchError
from ctrain.images import overlay
from tests import fake_apptainer
from tests.helpers import run_ctrain, sandbox

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
    assert overlay.apptainer_create_argv("apptainer", path, 15 * GIB, False) == [
        "apptainer", "overlay", "create", "--size", "15360", str(path),
    ]  # fmt: skip
    assert overlay.apptainer_create_argv("/opt/bin/apptainer", path, 64 * MIB, True) == [
        "/opt/bin/apptainer", "overlay", "create", "--size", "64", "--sparse", str(path),
    ]  # fmt: skip
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


def test_plan_picks_apptainer_unless_inodes(tmp_path: Path) -> None:
    target = str(tmp_path / "o.img")
    both = which_of("apptainer", "mkfs.ext3")
    plan = overlay.plan_create(target, "1G", None, True, both)
    assert (plan.method, plan.program, plan.size, plan.sparse) == (
        "apptainer",
        "/bin/apptainer",
        GIB,
        True,
    )
    plan = overlay.plan_create(target, "1G", "500K", True, both)
    assert (plan.method, plan.program, plan.inodes) == ("e2fsprogs", "/bin/mkfs.ext3", 500_000)
    plan = overlay.plan_create(target, "1G", None, True, which_of("mkfs.ext3"))
    assert plan.method == "e2fsprogs"
    with pytest.raises(ExternalToolError) as info:
        overlay.plan_create(target, "1G", None, True, which_of())
    assert "install e2fsprogs" in info.value.fix


def test_tool_finder_looks_in_sbin() -> None:
    if not Path("/usr/sbin/mkfs.ext3").exists() and not Path("/sbin/mkfs.ext3").exists():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true and no mkfs.ext3 in sbin (make system)", pytrace=False)
        pytest.skip("no mkfs.ext3 in sbin here")
    assert overlay.tool_finder({"PATH": "/nonexistent"})("mkfs.ext3") is not None


# -- the CLI: refusals and creation with the fake apptainer -------------------------------------


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    box = sandbox(tmp_path, FAKE_APPTAINER_LOG=str(tmp_path / "calls.jsonl"))
    fake_apptainer.install(box.bin)
    return box.env


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


@pytest.mark.parametrize("sparse", [True, False])
def test_create_with_apptainer(tmp_path: Path, cli_env: dict[str, str], sparse: bool) -> None:
    target = tmp_path / "my overlay.img"
    done = overlay_create(cli_env, tmp_path, str(target), "--size", "1G", *(["--sparse"] * sparse))
    assert done.returncode == 0, done.stderr
    calls = fake_apptainer.calls(tmp_path / "calls.jsonl")
    assert len(calls) == 1
    argv = calls[0]["argv"]
    assert isinstance(argv, list)
    assert argv[:-1] == ["overlay", "create", "--size", "1024", *(["--sparse"] * sparse)]
    temp = Path(argv[-1])
    assert temp.parent == tmp_path and temp.name.startswith(".my overlay.img.create-")
    assert not temp.exists()
    assert target.stat().st_size == GIB
    assert done.stdout.strip().startswith(f"created {target}: 1.0 GiB ext3 overlay")
    assert "(apptainer overlay create)" in done.stdout


def test_apptainer_failure_leaves_nothing(tmp_path: Path, cli_env: dict[str, str]) -> None:
    broken = tmp_path / "bin" / "apptainer"
    broken.write_text("#!/bin/sh\necho 'FATAL: overlay create: no mkfs.ext3' >&2\nexit 255\n")
    done = overlay_create(cli_env, tmp_path, "o.img", "--size", "1G")
    assert done.returncode == 5
    assert "apptainer overlay create failed: FATAL: overlay create: no mkfs.ext3" in done.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith((".o.img", "o.img"))]


# -- the read-write lock ------------------------------------------------------------------------

HOLD_THEN_EXEC = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from ctrain.images import overlay
    fd = overlay.acquire_rw_lock(
        Path(sys.argv[1]), f"pid {os.getpid()} on node7, job 77", lock_dir=lambda: sys.exit(9)
    )
    print(fd, flush=True)
    os.execvp("sleep", ["sleep", "120"])
    """
)


def _wait_exec(pid: int) -> None:
    end = time.monotonic() + 30
    while Path(f"/proc/{pid}/comm").read_text().strip() != "sleep":
        assert time.monotonic() < end, "the holder never exec'd"
        time.sleep(0.02)


def no_fallback() -> Path:
    """The fallback lock directory, asked for only when the overlay's own is read-only."""
    raise AssertionError("asked for the fallback lock directory of a writable one")


@pytest.fixture
def overlay_file(tmp_path: Path) -> Path:
    path = tmp_path / "o.img"
    path.write_bytes(b"")
    return path


def test_lock_is_held_across_exec_and_names_the_holder(overlay_file: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_THEN_EXEC, str(overlay_file)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip().isdigit()
        _wait_exec(holder.pid)
        with pytest.raises(LaunchError) as info:
            overlay.acquire_rw_lock(overlay_file, "me", lock_dir=no_fallback)
        error = info.value
        assert error.exit_code == 4
        assert f"in use read-write by pid {holder.pid} on node7, job 77" in error.message
        assert f"--overlay {overlay_file}:ro" in error.fix
        assert "\n" not in error.line()
    finally:
        holder.kill()
        holder.wait()
    fd = overlay.acquire_rw_lock(overlay_file, "me now", lock_dir=no_fallback)
    try:
        assert os.get_inheritable(fd)
        assert (overlay_file.parent / "o.img.lock").read_text().strip() == "me now"
    finally:
        os.close(fd)


def test_two_names_of_one_overlay_share_the_lock(overlay_file: Path) -> None:
    link = overlay_file.parent / "link.img"
    link.symlink_to(overlay_file)
    fd = overlay.acquire_rw_lock(overlay_file, "first", lock_dir=no_fallback)
    try:
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path; from ctrain.images import "
                "overlay; overlay.acquire_rw_lock(Path(sys.argv[1]), 'second', "
                "lock_dir=lambda: sys.exit(9))",
                str(link),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert child.returncode != 0 and "in use read-write by first" in child.stderr
    finally:
        os.close(fd)


def test_an_empty_holder_is_described() -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "o.img"
        fd = overlay.acquire_rw_lock(path, "", lock_dir=no_fallback, environ={"SLURM_JOB_ID": "5"})
        try:
            text = (Path(directory) / "o.img.lock").read_text()
            assert text.startswith("ctrain, pid ") and "Slurm job 5" in text
        finally:
            os.close(fd)


def test_fallback_lock_file_name() -> None:
    a = overlay.fallback_lock_file(Path("/ro/a/o.img"), Path("/c/locks"))
    b = overlay.fallback_lock_file(Path("/ro/b/o.img"), Path("/c/locks"))
    assert a.parent == Path("/c/locks") and a.name.endswith("-o.img.lock") and a != b


TRY_LOCK = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from ctrain.images import cachedir, overlay
    from ctrain.errors import LaunchError
    from ctrain.settings import resolve
    s = resolve({}, os.environ, Path.cwd())
    try:
        lock_dir = lambda: cachedir.lock_dir(s, os.environ)
        fd = overlay.acquire_rw_lock(Path(sys.argv[1]), sys.argv[2], lock_dir=lock_dir)
    except LaunchError as exc:
        print("refused:", exc.line(), flush=True)
        sys.exit(0)
    print("locked", flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory other users can enter (pytest's tmp_path is private to its owner)."""
    directory = Path(tempfile.mkdtemp(prefix="ctrain-lock-test-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        for path in directory.rglob("*"):
            with __import__("contextlib").suppress(OSError):
                path.chmod(0o755) if path.is_dir() else None
        shutil.rmtree(directory)


def test_read_only_directory_locks_in_the_cache(shared_dir: Path) -> None:
    """The overlay's directory is not writable (for root: run as nobody): the lock lives in
    CACHE/locks, CACHE as ./ctrain.toml names it, and still excludes a second user."""
    readonly = shared_dir / "ro"
    readonly.mkdir()
    (readonly / "o.img").write_bytes(b"")
    cache = shared_dir / "cache"
    cache.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("root without setpriv cannot test an unwritable directory")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        os.chown(cache, 65534, 65534)
    readonly.chmod(0o555)
    (shared_dir / "ctrain.toml").write_text(f'cache_dir = "{cache}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTRAIN_")}
    env.update(HOME=str(shared_dir), XDG_CONFIG_HOME=str(shared_dir / "xdg"))
    argv = [*prefix, sys.executable, "-c", TRY_LOCK, str(readonly / "o.img")]
    first = subprocess.Popen(
        [*argv, "first holder"],
        env=env,
        cwd=shared_dir,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        assert first.stdout.readline().strip() == "locked"
        second = subprocess.run(
            [*argv, "second"], env=env, cwd=shared_dir, capture_output=True, text=True, timeout=60
        )
        assert "refused:" in second.stdout and "in use read-write by first holder" in second.stdout
        locks = list((cache / "locks").iterdir())
        assert len(locks) == 1 and locks[0].name.endswith("-o.img.lock")
        assert not (readonly / "o.img.lock").exists()
    finally:
        assert first.stdin is not None
        first.stdin.close()
        first.wait(timeout=30)
