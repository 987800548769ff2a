"""Real e2fsprogs: overlays made by ``ctrain overlay create`` without apptainer, checked with
``dumpe2fs -h`` (ext3: a journal, no extents; the inode count), ``debugfs`` (``upper/`` and
``work/`` owned by the user) and ``e2fsck -fn`` (a clean filesystem)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ctrain.images import overlay
from tests.support.helpers import need, run_ctrain, sandbox

SBIN_PATH = "/usr/sbin:/sbin"
TOOLS = ("mkfs.ext3", "dumpe2fs", "debugfs", "e2fsck")


def tool(name: str) -> str:
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":" + SBIN_PATH)
    need(found is not None, f"{name} not found (make system installs e2fsprogs)")
    assert found is not None
    return found


@pytest.fixture(autouse=True)
def e2fsprogs() -> None:
    for name in TOOLS:
        tool(name)


def create(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ctrain overlay create`` with a PATH that has no apptainer (and no sbin: ctrain finds
    mkfs.ext3 there itself)."""
    env = sandbox(cwd).env
    return run_ctrain("overlay", "create", *args, env=env, cwd=cwd, timeout=300)


def header(image: Path) -> dict[str, str]:
    out = subprocess.run(
        [tool("dumpe2fs"), "-h", str(image)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


def root_listing(image: Path) -> dict[str, tuple[int, int, str]]:
    """name -> (uid, gid, mode) of the entries at the image's root."""
    out = subprocess.run(
        [tool("debugfs"), "-R", "ls -l /", str(image)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    entries = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 9 and re.fullmatch(r"\d+", fields[0]):
            entries[fields[-1]] = (int(fields[3]), int(fields[4]), fields[1])
    return entries


def fsck_clean(image: Path) -> bool:
    done = subprocess.run([tool("e2fsck"), "-fn", str(image)], capture_output=True, timeout=120)
    return done.returncode == 0


def test_ext3_with_the_inode_count_and_user_owned_dirs(tmp_path: Path) -> None:
    image = tmp_path / "my overlay.img"
    done = create(tmp_path, str(image), "--size", "256M", "--inodes", "20K")
    assert done.returncode == 0, done.stderr
    described = "256.0 MiB ext3 overlay, 20000 inodes, no reserved blocks"
    assert done.stdout.strip() == f"created {image}: {described}"
    assert image.stat().st_size == 256 * 1024**2

    info = header(image)
    features = info["Filesystem features"].split()
    assert "has_journal" in features and "extent" not in features  # ext3, not ext4
    inodes = int(info["Inode count"])
    assert 20000 * 0.98 <= inodes <= 20000 * 1.05  # mke2fs rounds to whole inode-table blocks
    assert info["Reserved block count"] == "0"

    listing = root_listing(image)
    me = (os.getuid(), os.getgid())
    assert listing["upper"][:2] == me and listing["work"][:2] == me
    assert listing["upper"][2] == listing["work"][2] == "40755"
    assert listing["."][:2] == me
    assert fsck_clean(image)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name not in ("home", "bin")) == [
        image.name
    ]


def test_sparse_and_allocated(tmp_path: Path) -> None:
    sparse = tmp_path / "sparse.img"
    full = tmp_path / "full.img"
    assert create(tmp_path, str(sparse), "--size", "512M", "--sparse").returncode == 0
    assert create(tmp_path, str(full), "--size", "512M").returncode == 0
    size = 512 * 1024**2
    assert sparse.stat().st_size == full.stat().st_size == size
    assert sparse.stat().st_blocks * 512 < size // 4
    assert full.stat().st_blocks * 512 >= size
    for image in (sparse, full):
        assert "has_journal" in header(image)["Filesystem features"]
        assert set(root_listing(image)) >= {"upper", "work", "lost+found"}
        assert fsck_clean(image)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can build for another uid")
def test_owned_by_the_uid_given(tmp_path: Path) -> None:
    plan = overlay.plan_create(
        str(tmp_path / "o.img"), "64M", None, True, overlay.tool_finder({"PATH": "/usr/bin"})
    )
    assert Path(plan.program).name == "mkfs.ext3"
    overlay.create(plan, 1234, 2345, {"PATH": "/usr/bin:/bin"})
    listing = root_listing(tmp_path / "o.img")
    assert listing["upper"][:2] == listing["work"][:2] == listing["."][:2] == (1234, 2345)


def test_leftovers_of_a_killed_create_are_removed(tmp_path: Path) -> None:
    leftover = tmp_path / ".o.img.create-999-deadbeef"
    leftover.write_bytes(b"half an image")
    other = tmp_path / ".p.img.create-999-deadbeef"
    other.write_bytes(b"another overlay's")
    assert create(tmp_path, "o.img", "--size", "64M", "--sparse").returncode == 0
    assert not leftover.exists() and other.exists()
    assert fsck_clean(tmp_path / "o.img")


def test_an_existing_overlay_is_never_replaced(tmp_path: Path) -> None:
    assert create(tmp_path, "o.img", "--size", "64M", "--sparse").returncode == 0
    before = (tmp_path / "o.img").read_bytes()
    again = create(tmp_path, "o.img", "--size", "128M")
    assert again.returncode == 2 and "already exists" in again.stderr
    assert (tmp_path / "o.img").read_bytes() == before
