"""The pyxis stand-in against docs/pyxis-facts.md: its option parsing and refusals are pyxis'
(args.c), a task's environment, image check and mounts are what pyxis_slurmstepd.c gives.
(The stand-in running a real Slurm job: tests/integration/test_pyxis_standin.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.standin_pyxis.options import (
    Asked,
    Mount,
    Refused,
    from_environment,
    ignored,
    split,
)
from tests.support.standin_pyxis.task import Failed, check_image, mount_lines, task_env


def test_options_in_both_forms_then_the_command() -> None:
    argv = ["-n", "2", "--container-image", "ubuntu:24.04", "--mpi=pmix",
            "--container-mounts=/a:/b:ro+rprivate,/c", "--no-container-mount-home",
            "--container-env", "A,B", "python", "--container-image=x"]  # fmt: skip
    asked, others, command = split(argv)
    assert asked.image == "ubuntu:24.04" and asked.env == ["A", "B"] and not asked.mount_home
    assert asked.mounts == [
        Mount("/a", "/b", ["x-create=auto", "rbind", "ro", "rprivate"]),
        Mount("/c", "/c", ["x-create=auto", "rbind"]),
    ]
    assert others == ["-n", "2", "--mpi=pmix"]
    assert command == ["python", "--container-image=x"]  # the command's own arguments


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--container-imag=x", "true"], "unrecognized option"),
        (["--container-image"], "requires an argument"),
        (["--no-container-mount-home=1", "true"], "doesn't allow an argument"),
        (["--container-image=", "true"], "--container-image: argument required"),
        (["--container-image=a", "--container-image=b", "true"], "specified multiple times"),
        (["--container-workdir=", "true"], "--container-workdir: argument required"),
        (["--container-mounts=", "true"], "--container-mounts: argument required"),
        (["--container-mounts=:", "true"], "invalid format: :"),
        (["--container-mounts=/tmp:", "true"], "invalid format: /tmp:"),
        (["--container-mounts=/a,", "true"], "invalid format"),
        (["--container-mounts=data:/d", "true"], "mount source must be"),
        (["--container-mounts=/data:d", "true"], "mount target must be"),
        (["--container-env=", "true"], "--container-env: argument required"),
        (["--container-env", "FOO,", "true"], "invalid format: FOO,"),
        (["--container-mount-home", "--no-container-mount-home", "true"], "both"),
        (["--container-remap-root", "true"], "stand-in: --container-remap-root"),
        (["--container-writable", "true"], "stand-in: --container-writable"),
    ],
)
def test_refusals(argv: list[str], words: str) -> None:
    with pytest.raises(Refused, match=words):
        split(argv)


def test_the_same_image_twice_is_one() -> None:
    asked, _, _ = split(["--container-image=a", "--container-image", "a", "true"])
    assert asked.image == "a"


def test_pyxis_variables_fill_what_the_command_line_did_not_give() -> None:
    asked, _, _ = split(["--container-workdir=/cli", "true"])
    from_environment(asked, {"PYXIS_CONTAINER_IMAGE": "img", "PYXIS_CONTAINER_WORKDIR": "/env"})
    assert asked.image == "img" and asked.workdir == "/cli"
    with pytest.raises(Refused, match="stand-in: PYXIS_CONTAINER_NAME"):
        from_environment(Asked(), {"PYXIS_CONTAINER_NAME": "n"})


def test_without_an_image_the_rest_is_ignored_loudly() -> None:
    asked, _, _ = split(["--container-workdir=/w", "--no-container-mount-home", "true"])
    found = ignored(asked)
    assert len(found) == 2 and all("neither --container-image" in line for line in found)
    assert "--[no-]container-mount-home" in found[0]


def test_task_environment() -> None:
    host = {"LANG": "de_DE.UTF-8", "LC_ALL": "C", "A": "host", "B": "host", "PATH": "/h"}
    image = {"A": "image", "B": "image", "C": "image", "PATH": "/i", "LC_ALL": "POSIX"}
    env = task_env(host, image, ["B", "C", "LC_ALL"])
    # LANG dropped; the image wins over A and PATH; B listed keeps the host's; C listed but
    # unset on the host gets the image's; LC_ALL listed, so kept from the host
    assert env == {"A": "image", "B": "host", "C": "image", "PATH": "/i", "LC_ALL": "C"}


def test_squashfs_images_are_checked(tmp_path: Path) -> None:
    (tmp_path / "good.sqsh").write_bytes(b"hsqs" + bytes(60))
    (tmp_path / "bad.sif").write_bytes(b"#!/usr/bin/env run-singularity\n")
    check_image(str(tmp_path / "good.sqsh"), "/")
    check_image("./good.sqsh", str(tmp_path))
    check_image("nvcr.io#nvidia/pytorch:24.01-py3", "/")  # a registry image: not fetched
    for image in (str(tmp_path / "bad.sif"), str(tmp_path / "missing.sqsh")):
        with pytest.raises(Failed, match="failed to create container filesystem"):
            check_image(image, "/")


def test_mounts(tmp_path: Path) -> None:
    scratch = str(tmp_path / "scratch")
    same = {"src": str(tmp_path), "dst": str(tmp_path), "flags": ["x-create=auto", "rbind"]}
    assert mount_lines([same], scratch) == []  # the host shows it there already
    ro = {**same, "flags": ["x-create=auto", "rbind", "ro"]}
    assert [line.split()[:2] for line in mount_lines([ro], scratch)] == [
        ["/usr/bin/mount", "-t"],  # the scratch tmpfs
        ["/usr/bin/mount", "--bind"],
        ["/usr/bin/mount", "-o"],  # remount,bind,ro
        ["/usr/bin/umount", "-l"],  # then the scratch goes
        ["rmdir", scratch],
    ]
    # x-create=auto: a destination the host lacks is made in an overlay of its parent
    made = mount_lines([{**same, "dst": str(tmp_path / "new" / "dir")}], scratch)
    assert any("-t overlay" in line and f"lowerdir={tmp_path}," in line for line in made)
    assert f"mkdir -p {tmp_path / 'new' / 'dir'} || exit 255" in made
    with pytest.raises(Failed, match="source path does not exist"):
        mount_lines([{**same, "src": str(tmp_path / "missing")}], scratch)
    with pytest.raises(Failed, match="destination /nowhere/x does not exist"):
        mount_lines([{**same, "dst": "/nowhere/x"}], scratch)
