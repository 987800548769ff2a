"""Overlays: ``overlay create`` (facts: "overlay create") and the checks and fcntl locks an
exec takes on its --overlay images (a write lock for read-write, a read lock for ``:ro``,
held while the command runs)."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
from pathlib import Path

from tests.support.standin.cli import parse, values
from tests.support.standin.identity import Fatal, Identity, Usage

# ext3 features (dumpe2fs names): compat ones are not checked; of the others, Apptainer accepts
# only these (pkg/image/ext3.go; facts: "Accepted ext3 overlay images")
COMPAT = {"has_journal", "ext_attr", "resize_inode", "dir_index", "dir_prealloc", "imagic_inodes",
          "sparse_super2", "fast_commit", "stable_inodes", "orphan_file"}  # fmt: skip
ACCEPTED = {"filetype", "needs_recovery", "meta_bg", "sparse_super", "large_file", "btree_dir"}


def tool(name: str) -> str:
    """A program as Apptainer finds it: on PATH or in the sbin directories."""
    import shutil

    path = os.environ.get("PATH", "") + ":/usr/local/sbin:/usr/sbin:/sbin"
    found = shutil.which(name, path=path)
    if found is None:
        raise Fatal(f"{name} not found in {path}")
    return found


def parse_overlays(specs: list[str], writable_tmpfs: bool) -> list[dict[str, object]]:
    overlays: list[dict[str, object]] = []
    for spec in specs:
        path, _, mode = spec.partition(":")
        if not Path(path).exists():
            raise Fatal(f"overlay {path}: no such file or directory")
        overlays.append({"path": path, "readonly": mode == "ro"})
    writable = [o for o in overlays if not o["readonly"]]
    if len(writable) > 1:
        raise Fatal("you can't specify more than one writable overlay")
    if writable and writable_tmpfs:
        raise Fatal("you can't use --writable-tmpfs with a writable overlay")
    return overlays


def check_ext3(path: Path) -> None:
    """An overlay image must be ext3 with a journal and no feature Apptainer refuses
    (pkg/image/ext3.go); checked with ``dumpe2fs -h``."""
    done = subprocess.run([tool("dumpe2fs"), "-h", str(path)], capture_output=True, text=True)
    found = [line for line in done.stdout.splitlines() if line.startswith("Filesystem features:")]
    if done.returncode != 0 or not found:
        raise Fatal(f"while checking image {path}: image format not recognized")
    features = set(found[0].split(":", 1)[1].split())
    refused = features - COMPAT - ACCEPTED
    if "has_journal" not in features or refused:
        raise Fatal(f"{path} is not a usable ext3 image: no journal, or features {sorted(refused)}")


def lock_overlays(overlays: list[dict[str, object]]) -> list[int]:
    """Take Apptainer's locks; the descriptors must stay open while the command runs."""
    held = []
    for overlay in overlays:
        path, readonly = Path(str(overlay["path"])), bool(overlay["readonly"])
        if path.is_dir():
            continue
        check_ext3(path)
        fd = os.open(path, os.O_RDONLY if readonly else os.O_RDWR)
        try:
            fcntl.lockf(fd, (fcntl.LOCK_SH if readonly else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno == errno.ENOLCK:  # no lock support: Apptainer skips locking
                continue
            mode = "reading" if readonly else "writing"
            raise Fatal(
                f"while locking ext3 partition from {path}: can't open {path} for {mode}, "
                "currently in use by another process"
            ) from exc
        held.append(fd)
    return held


def existing(path: Path) -> None:
    """An existing PATH: a SIF gets an overlay partition (not modelled), anything else is an
    error (facts: overlay create, "An existing writable PATH")."""
    from tests.support.standin.sif import is_sif

    if is_sif(path):
        raise Fatal(f"stand-in: adding an overlay partition to the SIF {path} is not modelled")
    raise Fatal(f"while creating overlay: {path} already exists and is not a SIF image")


def overlay_create(args: list[str], who: Identity, ran: list[list[str]]) -> int:
    """Create the overlay image; ``ran`` gets the commands run (for the log)."""
    flags, (path_text,) = parse("overlay create", args, who)
    if who.ce and values(flags, "--fakeroot", "-f"):
        raise Usage('Error for command "create": unknown flag: --fakeroot')
    size_text = (values(flags, "--size", "-s") or ["64"])[-1]
    if not size_text.isdigit():
        raise Usage(
            f'Error for command "create": invalid argument "{size_text}" for "-s, --size" flag: '
            f'strconv.ParseInt: parsing "{size_text}": invalid syntax'
        )
    if int(size_text) < 64:
        raise Fatal("image size must be equal or greater than 64 MiB")
    path, size = Path(path_text), int(size_text)
    if path.exists():
        existing(path)
    staging = path.with_name(path.name + ".ext3")
    if values(flags, "--sparse", "-S"):
        command = ["truncate", f"--size={size}M", str(staging)]
    else:
        command = ["dd", "if=/dev/zero", f"of={staging}", "bs=1M", f"count={size}"]
    mode = 0o777 if max(os.getuid(), os.getgid()) > 65535 else 0o755
    import tempfile  # not at the top: the stand-in's start-up time

    with tempfile.TemporaryDirectory() as stage:
        for name in ("upper", "work", *(f"upper/{d}" for d in values(flags, "--create-dir"))):
            Path(stage, name).mkdir(parents=True, exist_ok=True)
            Path(stage, name).chmod(mode)
        for step in (command, [tool("mkfs.ext3"), "-q", "-F", "-d", stage, str(staging)]):
            ran.append(step)
            done = subprocess.run(step, capture_output=True, text=True)
            if done.returncode != 0:
                staging.unlink(missing_ok=True)
                raise Fatal(f"while creating overlay: {' '.join(step)}: {done.stderr.strip()}")
    staging.rename(path)
    return 0
