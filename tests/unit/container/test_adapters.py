"""What the runtime adapters (apptainer, docker, podman, host) refuse, word for word, and the
choices each makes that the golden file's single request does not reach: a terminal, GPU forms,
the working directory, TMPDIR, env files, the release probe. Expected values are written here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ctrain.container.apptainer import Apptainer
from ctrain.container.runtimes import (
    Invocation,
    Request,
    choose_runtime,
    plan_invocation,
    runtime_named,
)
from ctrain.errors import CtrainError
from ctrain.releases import RuntimeVersion, installed_version, parse_version
from tests.support import fake_apptainer

NO_EVAL_FIX = "Apptainer >= 1.1 or SingularityCE >= 3.10"


def which(name: str) -> str:
    return f"/usr/bin/{name}"


def released(text: str) -> Callable[[str], RuntimeVersion]:
    return lambda program: parse_version(text, program)


def plan(
    tmp_path: Path,
    runtime: str = "docker",
    environ: dict[str, str] | None = None,
    gpus: tuple[str, ...] | None = None,
    version: str = "apptainer version 1.4.5",
    **fields: object,
) -> Invocation:
    (tmp_path / "img.sif").write_bytes(b"")
    (tmp_path / "ov.img").write_bytes(b"")
    values: dict[str, object] = {"image": str(tmp_path / "img.sif"), "command": ("true",)}
    values |= {"launch": False, "action": "exec"} | fields
    request = Request(runtime, **values)  # type: ignore[arg-type]
    return plan_invocation(request, environ or {}, which, gpus, version_of=released(version))


REFUSALS = {
    "host --bind": (
        {"runtime": "host", "binds": ("TMP",)},
        "--bind needs a container; the host runtime sees the host's files as they are",
        "drop --bind (and CTRAIN_BINDS) or choose a container runtime",
    ),
    "host --overlay": (
        {"runtime": "host", "overlay": "TMP/ov.img"},
        "--overlay needs apptainer or singularity",
        "drop --overlay",
    ),
    "host --cwd": (
        {"runtime": "host", "workdir": "/in"},
        "--cwd needs a container; the host runtime runs where ctrain runs",
        "cd to the directory first and drop --cwd (and CTRAIN_CWD)",
    ),
    "host run": (
        {"runtime": "host", "action": "run"},
        "the host runtime has no runscript",
        "use ctrain exec -- CMD",
    ),
    **{
        f"{engine} --overlay": (
            {"runtime": engine, "overlay": "TMP/ov.img"},
            f"--overlay needs apptainer or singularity; {engine} cannot mount one",
            "bind a directory instead (-B SRC:DST) or use --runtime apptainer",
        )
        for engine in ("docker", "podman")
    },
    **{
        f"{engine} --nv without a GPU": (
            {"runtime": engine, "nv": True, "gpus": ()},
            "--nv but this task sees no GPU",
            "ask Slurm for GPUs or drop --nv",
        )
        for engine in ("docker", "podman")
    },
    "no command": (
        {"command": ()},
        "no command given",
        "put it after --: ctrain exec IMAGE -- python train.py",
    ),
    "unreadable env file": (
        {"env_files": ("TMP/nope.env",)},
        "cannot read --env-file TMP/nope.env: No such file or directory",
        "fix the path",
    ),
    "no image": (
        {"runtime": "apptainer", "image": ""},
        "no image given",
        "name one (ctrain exec IMAGE -- ...) or set CTRAIN_IMAGE",
    ),
    "TMPDIR with a colon under apptainer": (
        {"runtime": "apptainer", "environ": {"TMPDIR": "TMP/job:1"}},
        "bind path 'TMP/job:1' holds ':' or ',', which apptainer's --bind cannot express",
        "bind a parent directory or a symlink without those characters",
    ),
    "$ without --no-eval": (
        {"runtime": "apptainer", "version": "apptainer version 1.0.3", "env_pairs": ("A=$x",)},
        "A='$x' would be shell-evaluated by apptainer version 1.0.3, which has no --no-eval "
        "(values with $, ` or \\ do not arrive as given)",
        f"use {NO_EVAL_FIX} (module load apptainer), or pass the value in a file (--bind) instead",
    ),
}


def with_tmp(value: object, tmp_path: Path) -> object:
    if isinstance(value, str):
        return value.replace("TMP", str(tmp_path))
    if isinstance(value, tuple):
        return tuple(with_tmp(item, tmp_path) for item in value)
    if isinstance(value, dict):
        return {key: with_tmp(item, tmp_path) for key, item in value.items()}
    return value


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_word_for_word(case: str, tmp_path: Path) -> None:
    fields, message, fix = REFUSALS[case]
    (tmp_path / "job:1").mkdir()
    with pytest.raises(CtrainError) as caught:
        plan(tmp_path, **{key: with_tmp(value, tmp_path) for key, value in fields.items()})  # type: ignore[arg-type]
    assert (caught.value.message, caught.value.fix) == (with_tmp(message, tmp_path), fix)


@pytest.mark.parametrize(
    ("requested", "looked_for"),
    [
        ("auto", "apptainer, singularity, ch-run, docker, podman"),
        ("podman", "podman"),
        ("charliecloud", "ch-run"),
        ("pyxis", "srun"),
    ],
)
def test_no_runtime_names_what_was_looked_for(requested: str, looked_for: str) -> None:
    with pytest.raises(CtrainError) as caught:
        choose_runtime(requested, lambda _name: None)
    assert caught.value.message == f"no container runtime found on PATH (looked for {looked_for})"
    assert caught.value.fix == (
        "load the site's apptainer module, or use the current environment: --runtime host"
    )


def test_the_host_runtime_looks_for_no_program() -> None:
    def nothing_on_path(name: str) -> str | None:
        raise AssertionError(f"looked for {name}")

    assert choose_runtime("host", nothing_on_path) == (runtime_named("host"), "")


def test_the_invocation_names_the_runtime_found(tmp_path: Path) -> None:
    (tmp_path / "i").write_bytes(b"")
    request = Request("auto", "exec", "img", ("true",), launch=False)
    only_podman = plan_invocation(
        request,
        {},
        lambda name: "/bin/podman" if name == "podman" else None,
        None,
        version_of=released(""),
    )
    assert only_podman.runtime == "podman" and only_podman.argv[0] == "/bin/podman"


@pytest.mark.parametrize(
    ("action", "tty", "flags"),
    [
        ("exec", False, []),
        ("exec", True, ["-it"]),
        ("shell", False, ["-i"]),
        ("run", True, ["-it"]),
    ],
)
def test_docker_terminal_flags(tmp_path: Path, action: str, tty: bool, flags: list[str]) -> None:
    argv = plan(tmp_path, action=action, tty=tty).argv
    assert [arg for arg in argv if arg in ("-i", "-it", "-t")] == flags


def test_docker_working_directory(tmp_path: Path) -> None:
    root = plan(tmp_path, cwd="/").argv
    assert "--mount" not in root and root[root.index("--workdir") + 1] == "/"
    asked = plan(tmp_path, cwd="/work", workdir="/in").argv
    assert "--mount" not in asked and asked[asked.index("--workdir") + 1] == "/in"
    here = plan(tmp_path, cwd=str(tmp_path)).argv
    assert here[here.index("--mount") + 1] == f"type=bind,source={tmp_path},target={tmp_path}"
    bound = plan(tmp_path, cwd="/work", binds=(f"{tmp_path}:/work",)).argv
    assert bound.count("--mount") == 1


@pytest.mark.parametrize(
    ("runtime", "gpus", "flags"),
    [
        ("docker", None, ["--gpus", "all"]),
        ("docker", ("1",), ["--gpus", '"device=1"']),
        ("podman", None, ["--device", "nvidia.com/gpu=all"]),
        ("podman", ("0", "2"), ["--device", "nvidia.com/gpu=0", "--device", "nvidia.com/gpu=2"]),
    ],
)
def test_engine_gpu_flags(
    tmp_path: Path, runtime: str, gpus: tuple[str, ...] | None, flags: list[str]
) -> None:
    argv = plan(tmp_path, runtime=runtime, gpus=gpus, nv=True).argv
    start = argv.index(flags[0])
    assert argv[start : start + len(flags)] == flags
    assert argv.count(flags[0]) == len(flags) // 2


def test_gpu_uuids_are_not_renumbered(tmp_path: Path) -> None:
    """Only indices are renumbered from 0 inside the container; a UUID names the same GPU."""
    env = {"CUDA_VISIBLE_DEVICES": "GPU-1a2b"}
    argv = plan(tmp_path, environ=env, gpus=("GPU-1a2b",), nv=True).argv
    assert argv[argv.index("--gpus") + 1] == '"device=GPU-1a2b"'
    assert argv[argv.index("CUDA_VISIBLE_DEVICES") - 1] == "-e"
    assert not [arg for arg in argv if arg.startswith("CUDA_VISIBLE_DEVICES=")]


@pytest.mark.parametrize("action", ["exec", "run"])
def test_engines_get_the_image_without_docker_scheme(tmp_path: Path, action: str) -> None:
    argv = plan(tmp_path, image="docker://busybox:1", action=action).argv
    assert "busybox:1" in argv and "docker://busybox:1" not in argv


def test_job_tmpdir_is_bound_next_to_other_binds_and_not_on_the_host(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    argv = plan(tmp_path, environ={"TMPDIR": str(job)}, binds=(f"{tmp_path}:/data",)).argv
    mounts = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--mount"]
    assert f"type=bind,source={job},target={job}" in mounts
    assert f"type=bind,source={tmp_path},target=/data" in mounts
    host = plan(tmp_path, runtime="host", environ={"TMPDIR": str(job)})
    assert host.argv == ["true"] and host.added.get("TMPDIR") is None


def test_env_files_in_order_then_pairs(tmp_path: Path) -> None:
    first, second = tmp_path / "a.env", tmp_path / "b.env"
    first.write_text("X=file\nY=first\nZ=ü\n", encoding="utf-8")
    second.write_text("Y=second\n", encoding="utf-8")
    got = plan(tmp_path, env_files=(str(first), str(second)), env_pairs=("X=pair",)).added
    assert (got["X"], got["Y"], got["Z"]) == ("pair", "second", "ü")


def test_a_bad_env_file_line_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text("A=1\nnot a pair\n")
    with pytest.raises(CtrainError) as caught:
        plan(tmp_path, env_files=(str(bad),))
    assert caught.value.message == f"{bad}:2: 'not a pair' is not NAME=VALUE"


def test_host_shell_runs_the_given_shell_or_bash(tmp_path: Path) -> None:
    assert plan(tmp_path, runtime="host", action="shell", command=("zsh", "-l")).argv == [
        "zsh",
        "-l",
    ]
    assert plan(tmp_path, runtime="host", action="shell", command=()).argv == ["/bin/bash"]


def test_apptainer_cwd_only_when_asked_and_in_place(tmp_path: Path) -> None:
    argv = plan(tmp_path, runtime="apptainer", workdir="/in").argv
    image = str(tmp_path / "img.sif")
    assert argv == ["/usr/bin/apptainer", "exec", "--cleanenv", "--no-eval", "--cwd", "/in",
                    image, "true"]  # fmt: skip


def test_apptainer_notes(tmp_path: Path) -> None:
    new = plan(tmp_path, runtime="apptainer", image="docker-daemon://img:1")
    assert list(new.notes) == [
        "apptainer version 1.4.5: container variables as APPTAINERENV_NAME, values verbatim "
        "(--no-eval)",
        "image docker-daemon://img:1 given as docker-daemon:img:1, the form apptainer exec takes",
    ]
    old = plan(tmp_path, runtime="apptainer", version="apptainer version 1.0.3")
    assert list(old.notes) == [
        "apptainer version 1.0.3: container variables as APPTAINERENV_NAME, checked, no $`\\"
    ]


# (uid, /dev/fuse open to the caller) -> whether the SIF is extracted (--unsquash)
FUSE_TABLE = [
    ((0, 0), True, False),
    ((0, 0), False, False),  # root mounts the SIF with the kernel's squashfs
    ((1500, 1500), True, False),  # squashfuse through /dev/fuse
    ((1500, 1500), False, True),
    ((1500, 0), False, True),  # the uid decides: root's group gives no privilege
    ((0, 1500), False, False),
    (None, False, False),  # the caller unknown: nothing assumed
]


@pytest.mark.parametrize(("user", "fuse", "unsquash"), FUSE_TABLE)
def test_apptainer_extracts_the_sif_only_without_fuse_and_root(
    tmp_path: Path, user: tuple[int, int] | None, fuse: bool, unsquash: bool
) -> None:
    planned = plan(tmp_path, runtime="apptainer", user=user, fuse=fuse)
    image = str(tmp_path / "img.sif")
    extract = ["--unsquash"] if unsquash else []
    assert planned.argv == ["/usr/bin/apptainer", "exec", "--cleanenv", "--no-eval", *extract,
                            image, "true"]  # fmt: skip
    noted = [n for n in planned.notes if "/dev/fuse" in n]
    assert noted == (
        ["/dev/fuse is closed to you: --unsquash extracts the image to a temporary sandbox at "
         "each start"] if unsquash else []
    )  # fmt: skip


def test_an_overlay_without_fuse_is_refused_before_launch(tmp_path: Path) -> None:
    with pytest.raises(CtrainError) as refused:
        plan(
            tmp_path,
            runtime="apptainer",
            user=(1500, 1500),
            fuse=False,
            overlay=str(tmp_path / "ov.img:ro"),
        )
    assert refused.value.message == (
        f"overlay {tmp_path / 'ov.img'} cannot be mounted: an unprivileged apptainer mounts "
        "overlay images with fuse2fs, and /dev/fuse is closed to you here"
    )
    assert refused.value.fix == (
        "run without --overlay (install extra packages into a directory you bind with -B and put "
        "on PYTHONPATH), or ask the site to open /dev/fuse to users"
    )
    as_root = plan(
        tmp_path, runtime="apptainer", user=(0, 0), fuse=False, overlay=str(tmp_path / "ov.img:ro")
    )
    assert as_root.argv[-4:-2] == ["--overlay", f"{tmp_path / 'ov.img'}:ro"]


def test_apptainer_argv_needs_the_probed_release(tmp_path: Path) -> None:
    spec = plan(tmp_path, runtime="apptainer").spec
    with pytest.raises(AssertionError, match=r"^Apptainer\.argv before probed\(\)$"):
        Apptainer().argv(spec, "apptainer")


def test_a_missing_patch_number_is_zero() -> None:
    assert parse_version("singularity-ce version 3.10\n", "s").number == (3, 10, 0)


@pytest.mark.parametrize(("output", "shown"), [("", "nothing"), ("oops\nnot it\n", "not it")])
def test_an_unreadable_release_says_what_was_printed(output: str, shown: str) -> None:
    with pytest.raises(CtrainError) as caught:
        parse_version(output, "/opt/x/apptainer")
    assert caught.value.message == (
        "cannot tell which release /opt/x/apptainer is: `/opt/x/apptainer --version` printed "
        f"{shown!r}"
    )
    assert caught.value.fix == (
        f"load a module of {NO_EVAL_FIX}, or choose another runtime: --runtime docker|podman|host"
    )


def test_installed_version_asks_the_program_in_the_given_environment(tmp_path: Path) -> None:
    program = fake_apptainer.install(tmp_path / "bin")  # refuses flags Apptainer does not have
    got = installed_version(str(program), {"FAKE_APPTAINER_VERSION": "1.0.3"})
    assert (got.flavour, got.number) == ("apptainer", (1, 0, 3))
    garbled = tmp_path / "garbled"
    garbled.write_text("#!/bin/sh\necho 'not a version'\n")
    garbled.chmod(0o755)
    with pytest.raises(CtrainError, match=f"cannot tell which release {garbled} is"):
        installed_version(str(garbled), {})


def test_a_release_probe_that_hangs_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It answers, but only after the time ctrain gives it."""
    monkeypatch.setattr("ctrain.releases.VERSION_TIMEOUT", 0.5)
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\necho 'apptainer version 1.4.5'\n")
    slow.chmod(0o755)
    with pytest.raises(CtrainError, match="did not finish within 0.5 s"):
        installed_version(str(slow), {})


# (release, --nv, the command's own library variable) -> whether ctrain asks Apptainer to put
# the host's driver libraries first (PREPEND_LD_LIBRARY_PATH, Apptainer >= 1.5)
DRIVER_TABLE = [
    ("apptainer version 1.4.5", True, None, False),  # 1.4 puts them first by itself
    ("apptainer version 1.5.0", True, None, True),
    ("apptainer version 1.5.3", True, None, True),
    ("apptainer version 1.5.3", False, None, False),  # no --nv, no driver libraries
    ("apptainer version 1.5.3", True, "LD_LIBRARY_PATH=/opt/mine", False),
    ("apptainer version 1.5.3", True, "PREPEND_LD_LIBRARY_PATH=/opt/mine", False),
    ("singularity-ce version 4.5.1", True, None, False),  # no such variable in SingularityCE
]


@pytest.mark.parametrize(("version", "nv", "own", "prepends"), DRIVER_TABLE)
def test_nv_keeps_the_host_driver_first_on_apptainer_1_5(
    tmp_path: Path, version: str, nv: bool, own: str | None, prepends: bool
) -> None:
    pairs = (own,) if own else ()
    runtime = "singularity" if version.startswith("singularity") else "apptainer"
    planned = plan(tmp_path, runtime=runtime, version=version, nv=nv, env_pairs=pairs)
    prefix = "SINGULARITYENV_" if runtime == "singularity" else "APPTAINERENV_"
    carried = planned.env.get(prefix + "PREPEND_LD_LIBRARY_PATH")
    if prepends:
        assert carried == "/.singularity.d/libs"
        assert any(n.startswith("--nv: PREPEND_LD_LIBRARY_PATH=") for n in planned.notes)
    else:
        assert carried == (own.split("=", 1)[1] if own and own.startswith("PREPEND") else None)
        assert not any(n.startswith("--nv:") for n in planned.notes)


def test_the_driver_first_note_in_full(tmp_path: Path) -> None:
    planned = plan(tmp_path, runtime="apptainer", version="apptainer version 1.5.3", nv=True)
    assert list(planned.notes) == [
        "apptainer version 1.5.3: container variables as APPTAINERENV_NAME, values verbatim "
        "(--no-eval)",
        "--nv: PREPEND_LD_LIBRARY_PATH=/.singularity.d/libs, so the host's NVIDIA driver "
        "libraries come before the image's own library directories (Apptainer 1.4's order)",
    ]


@pytest.mark.parametrize("runtime", ["apptainer", "singularity", "docker"])
def test_the_pmix_servers_directory_is_bound_into_a_sif_container(
    tmp_path: Path, runtime: str
) -> None:
    """srun --mpi=pmix: the ranks' PMIx clients need the server's directory (its shared-memory
    store), which Slurm keeps under SlurmdSpoolDir, outside what Apptainer binds by itself."""
    server = tmp_path / "spool" / "pmix.7.0"
    server.mkdir(parents=True)
    environ = {"PMIX_SERVER_TMPDIR": f"{server}/", "PMIX_RANK": "0"}
    planned = plan(tmp_path, runtime=runtime, environ=environ)
    if runtime == "docker":  # the variables pass, the directory is not mounted
        assert planned.argv == [
            "/usr/bin/docker", "run", "--rm", "--init", "--network", "host", "--ipc", "host",
            "--workdir", "/", "-e", "PMIX_RANK", "-e", "PMIX_SERVER_TMPDIR",
            "-e", "PYTHONNOUSERSITE", "--entrypoint", "true", str(tmp_path / "img.sif"),
        ]  # fmt: skip
    else:
        assert f"{server}:{server}:rw" in planned.argv
    for missing in (str(tmp_path / "gone"), "relative/pmix.7.0", ""):
        planned = plan(tmp_path, runtime="apptainer", environ={"PMIX_SERVER_TMPDIR": missing})
        assert "--bind" not in planned.argv
    mine = plan(tmp_path, runtime="apptainer", environ=environ, binds=(f"{tmp_path}:{server}:ro",))
    assert mine.argv.count("--bind") == 1 and f"{tmp_path}:{server}:ro" in mine.argv
