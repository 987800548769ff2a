"""The pyxis adapter itself, called directly: the srun argv of each case written out, every
refusal's message and fix, every --dry-run note, and which images are files."""

from __future__ import annotations

import pytest

from ctrain.container.pyxis import Pyxis, mounts_value
from ctrain.container.spec import Bind, Overlay, RunSpec
from ctrain.errors import SpecError

SRUN = "/usr/bin/srun"
IMAGE = "docker://127.0.0.1:5000/ctrain:ci-cpu"


def spec(**fields: object) -> RunSpec:
    base: dict[str, object] = {"image": IMAGE, "action": "exec", "command": ("python", "t.py")}
    return RunSpec(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (  # ctrain runs in /: the container starts there too, nothing to mount
            {"cwd": "/"},
            [SRUN, "--container-image=127.0.0.1:5000#ctrain:ci-cpu", "--container-workdir=/",
             "--no-container-mount-home", "python", "t.py"],
        ),
        (  # ctrain's directory is mounted at the same path and is the workdir
            {"cwd": "/home/u/p", "env": {"X": "1", "SLURM_JOB_ID": "7"}},
            [SRUN, "--container-image=127.0.0.1:5000#ctrain:ci-cpu",
             "--container-mounts=/home/u/p:/home/u/p", "--container-workdir=/home/u/p",
             "--container-env=X", "--no-container-mount-home", "python", "t.py"],
        ),
        (  # already mounted there by the user: not twice
            {"cwd": "/home/u/p", "binds": (Bind("/scratch/p", "/home/u/p", "ro"),)},
            [SRUN, "--container-image=127.0.0.1:5000#ctrain:ci-cpu",
             "--container-mounts=/scratch/p:/home/u/p:ro", "--container-workdir=/home/u/p",
             "--no-container-mount-home", "python", "t.py"],
        ),
        (  # another bind elsewhere: ctrain's directory still comes last
            {"cwd": "/home/u/p", "binds": (Bind("/data", "/data"),)},
            [SRUN, "--container-image=127.0.0.1:5000#ctrain:ci-cpu",
             "--container-mounts=/data:/data,/home/u/p:/home/u/p",
             "--container-workdir=/home/u/p", "--no-container-mount-home", "python", "t.py"],
        ),
        (  # a workdir asked for is the image's business: ctrain's directory is not mounted
            {"cwd": "/home/u/p", "workdir": "/workspace"},
            [SRUN, "--container-image=127.0.0.1:5000#ctrain:ci-cpu",
             "--container-workdir=/workspace", "--no-container-mount-home", "python", "t.py"],
        ),
        (  # a squashfs file relative to ctrain's directory
            {"cwd": "/", "image": "img/c.sqsh", "command": ("true",)},
            [SRUN, "--container-image=/img/c.sqsh", "--container-workdir=/",
             "--no-container-mount-home", "true"],
        ),
        (
            {"cwd": "/", "action": "shell", "command": ()},
            [SRUN, "--pty", "--container-image=127.0.0.1:5000#ctrain:ci-cpu",
             "--container-workdir=/", "--no-container-mount-home", "/bin/bash"],
        ),
        (
            {"cwd": "/", "action": "shell", "command": ("/bin/zsh", "-l")},
            [SRUN, "--pty", "--container-image=127.0.0.1:5000#ctrain:ci-cpu",
             "--container-workdir=/", "--no-container-mount-home", "/bin/zsh", "-l"],
        ),
    ],
)  # fmt: skip
def test_argv(fields: dict[str, object], expected: list[str]) -> None:
    assert Pyxis().argv(spec(**fields), SRUN) == expected


@pytest.mark.parametrize(
    ("fields", "message", "fix"),
    [
        ({"action": "run"}, "pyxis has no runscript to run", "use ctrain exec IMAGE -- CMD"),
        (
            {"overlay": Overlay("/o.img", False)},
            "--overlay needs apptainer or singularity",
            "drop --overlay",
        ),
    ],
)
def test_argv_refusals(fields: dict[str, object], message: str, fix: str) -> None:
    with pytest.raises(SpecError) as caught:
        Pyxis().argv(spec(**fields), SRUN)
    assert (caught.value.message, caught.value.fix) == (message, fix)


def test_process_env_is_the_host_with_the_asked_values() -> None:
    environ = {"PATH": "/bin", "X": "host", "SLURM_JOB_ID": "7", "SLURM_STEP_ID": "batch"}
    got = Pyxis().process_env(spec(env={"X": "asked", "Y": "2"}), environ)
    assert got == {"PATH": "/bin", "X": "asked", "Y": "2", "SLURM_JOB_ID": "7",
                   "SLURM_STEP_ID": "batch"}  # fmt: skip


STEP_FIX = (
    "run ctrain exec --runtime pyxis once in the batch script or salloc shell, "
    "not under srun (or use ctrain job render --runtime pyxis)"
)


@pytest.mark.parametrize(
    ("procid", "message"),
    [
        (
            {"SLURM_PROCID": "1"},
            "--runtime pyxis starts an srun step, and this is already task 1 of step 3",
        ),
        ({}, "--runtime pyxis starts an srun step, and this is already task ? of step 3"),
    ],
)
def test_process_env_refuses_inside_a_step(procid: dict[str, str], message: str) -> None:
    environ = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "3", "SLURM_STEP_NUM_TASKS": "2", **procid}
    with pytest.raises(SpecError) as caught:
        Pyxis().process_env(spec(), environ)
    assert (caught.value.message, caught.value.fix) == (message, STEP_FIX)


FIRST_NOTE = (
    "pyxis: a new srun step; enroot makes the container on each node, in the places the "
    "site's enroot.conf names (pyxis does not pass the job's ENROOT_CACHE_PATH, "
    "ENROOT_DATA_PATH, ENROOT_RUNTIME_PATH)"
)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"image": "/s/c.sqsh"}, [FIRST_NOTE]),
        ({"image": "/s//x/./c.sqsh"}, [FIRST_NOTE]),  # an absolute file goes as written
        (
            {"image": "docker://nvcr.io/nvidia/tf:1", "nv": True},
            [
                FIRST_NOTE,
                "image docker://nvcr.io/nvidia/tf:1 given as nvcr.io#nvidia/tf:1, enroot's form",
                "--nv: the GPUs of the step, through enroot's NVIDIA hook",
            ],
        ),
        (
            {"image": "c.sqsh", "cwd": "/w"},
            [FIRST_NOTE, "image c.sqsh given as /w/c.sqsh, enroot's form"],
        ),
    ],
)
def test_notes(fields: dict[str, object], expected: list[str]) -> None:
    assert Pyxis().notes(spec(**fields)) == expected


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("docker://nvcr.io/nvidia/tf:1", None),
        ("docker-daemon:ctrain:ci", None),
        ("nvcr.io#nvidia/tf:1", None),
        ("./a#b.sqsh", "./a#b.sqsh"),
        ("/s/a#b.sqsh", "/s/a#b.sqsh"),
        ("c.sqsh", "c.sqsh"),
    ],
)
def test_image_file(image: str, expected: str | None) -> None:
    assert Pyxis().image_file(image) == expected


@pytest.mark.parametrize("path", ["/data/a,b", "/x:y"])
def test_mount_path_refusal(path: str) -> None:
    with pytest.raises(SpecError) as caught:
        mounts_value([Bind(path, "/d")])
    assert (caught.value.message, caught.value.fix) == (
        f"mount path {path!r} holds ',' or ':', which pyxis' --container-mounts cannot express",
        "mount a parent directory or a symlink without those characters",
    )


def test_no_mounts_no_option() -> None:
    assert mounts_value([]) == ""
