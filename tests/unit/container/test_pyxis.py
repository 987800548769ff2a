"""The pyxis runtime: the srun step ``ctrain exec --runtime pyxis`` runs,
and its refusals (facts: docs/pyxis-facts.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.container.pyxis import env_names, mounts_value
from ctrain.container.runtimes import Request, choose_runtime, plan_invocation, runtime_named
from ctrain.container.spec import Bind
from ctrain.errors import CtrainError, SpecError
from ctrain.releases import RuntimeVersion
from tests.support.helpers import run_ctrain, sandbox


def version_of(program: str) -> RuntimeVersion:
    raise AssertionError("pyxis asks no version")


def test_mounts_and_names() -> None:
    binds = [Bind("/data", "/data", "ro"), Bind("/scratch/out", "/out")]
    assert mounts_value(binds) == "/data:/data:ro,/scratch/out:/out"
    with pytest.raises(SpecError, match="cannot express"):
        mounts_value([Bind("/data/a,b", "/data")])
    with pytest.raises(SpecError, match="cannot express"):
        mounts_value([Bind("/data", "/x:y")])
    env = {"SLURM_JOB_ID": "1", "PMIX_RANK": "0", "TMPDIR": "/t", "CTRAIN_MODE": "x", "A": "1"}
    assert env_names(env) == ["A", "CTRAIN_MODE", "TMPDIR"]


def plan(tmp_path: Path, environ: dict[str, str], **fields: object) -> list[str]:
    base: dict[str, object] = {
        "runtime": "pyxis",
        "action": "exec",
        "image": "docker://127.0.0.1:5000/ctrain:ci-cpu",
        "command": ("python", "train.py"),
        "cwd": str(tmp_path),
    }
    request = Request(**{**base, **fields})  # type: ignore[arg-type]
    which = lambda name: f"/usr/bin/{name}"  # noqa: E731
    return plan_invocation(request, environ, which, None, version_of=version_of).argv


def test_exec_is_one_srun_step(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "job").mkdir()
    environ = {"SLURM_JOB_ID": "7", "TMPDIR": str(tmp_path / "job"), "LANG": "C.UTF-8"}
    argv = plan(tmp_path, environ, binds=(f"{tmp_path}/data:/data:ro",), env_pairs=("X=a,b",))
    assert argv == [
        "/usr/bin/srun",
        "--container-image=127.0.0.1:5000#ctrain:ci-cpu",
        f"--container-mounts={tmp_path}/job:{tmp_path}/job,{tmp_path}/data:/data:ro,"
        f"{tmp_path}:{tmp_path}",
        f"--container-workdir={tmp_path}",
        "--container-env=PYTHONNOUSERSITE,TMPDIR,X",
        "--no-container-mount-home",
        "ctrain",
        "launch",
        "--",
        "python",
        "train.py",
    ]


def test_asked_workdir_is_not_mounted_for_you(tmp_path: Path) -> None:
    argv = plan(tmp_path, {}, workdir="/workspace", launch=False)
    assert "--container-workdir=/workspace" in argv
    assert not any(a.startswith("--container-mounts") for a in argv)
    assert argv[-2:] == ["python", "train.py"]


def test_shell_takes_a_terminal(tmp_path: Path) -> None:
    argv = plan(tmp_path, {}, action="shell", command=())
    assert argv[:2] == ["/usr/bin/srun", "--pty"] and argv[-1] == "/bin/bash"


def test_process_env_carries_the_asked_values(tmp_path: Path) -> None:
    which = lambda name: f"/usr/bin/{name}"  # noqa: E731
    (tmp_path / "i.sqsh").write_bytes(b"hsqs")
    request = Request("pyxis", "exec", str(tmp_path / "i.sqsh"), ("x",), env_pairs=("X=1",))
    invocation = plan_invocation(request, {"PATH": "/bin"}, which, None, version_of=version_of)
    assert invocation.env == {"PATH": "/bin", "X": "1", "PYTHONNOUSERSITE": "1"}


@pytest.mark.parametrize(
    ("fields", "environ", "words"),
    [
        (
            {},
            {
                "SLURM_JOB_ID": "7",
                "SLURM_STEP_ID": "0",
                "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_PROCID": "1",
            },
            "already task 1",
        ),
        ({"action": "run"}, {}, "no runscript"),
        ({"image": "/nowhere/ctrain.sqsh"}, {}, "does not exist"),
        ({"image": "oras://ghcr.io/a/b:1"}, {}, "enroot takes docker://"),
    ],
)
def test_refusals(tmp_path: Path, fields: dict[str, object], environ: dict[str, str],
                  words: str) -> None:  # fmt: skip
    with pytest.raises(CtrainError, match=words):
        plan(tmp_path, environ, **fields)


def test_the_batch_step_may_start_a_step(tmp_path: Path) -> None:
    argv = plan(tmp_path, {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "batch"})
    assert argv[0] == "/usr/bin/srun"


def test_pyxis_is_srun_and_never_auto() -> None:
    runtime, program = choose_runtime("pyxis", lambda n: f"/bin/{n}" if n == "srun" else None)
    assert runtime is runtime_named("pyxis") and program == "/bin/srun"
    with pytest.raises(CtrainError, match="looked for srun"):
        choose_runtime("pyxis", lambda n: None)
    with pytest.raises(CtrainError, match="no container runtime"):
        choose_runtime("auto", lambda n: "/bin/srun" if n == "srun" else None)


def test_exec_dry_run_names_the_import_first(tmp_path: Path) -> None:
    """A docker:// image is imported once before the step (images/stores/enroot.py): --dry-run says
    with which command, and enroot's paths in the cache."""
    box = sandbox(tmp_path)
    box.add_program("srun", "#!/bin/sh\nexit 0\n")
    ref = "docker://127.0.0.1:5000/lab/ctrain:1"
    env = box.with_env(CTRAIN_CACHE_DIR=str(tmp_path / "cache"))
    done = run_ctrain("exec", "--runtime", "pyxis", "--dry-run", ref, "--", "true", env=env)
    assert done.returncode == 0, done.stderr
    target = tmp_path / "cache" / "images" / "docker_127.0.0.1_5000_lab_ctrain_1.sqsh"
    assert (
        f"  pulled first: ctrain pull --runtime pyxis 'docker://127.0.0.1:5000#lab/ctrain:1', "
        f"then {target} is run in its place"
    ) in done.stdout.splitlines()
    assert f"  pull env ENROOT_CACHE_PATH={tmp_path}/cache/enroot/cache" in done.stdout
    (tmp_path / "x.sqsh").write_bytes(b"")
    for given in ("127.0.0.1:5000#lab/ctrain:1", str(tmp_path / "x.sqsh")):  # as they are
        shown = run_ctrain("resolve", "--runtime", "pyxis", given, env=env)
        assert shown.returncode == 0 and shown.stdout == given + "\n", shown.stderr
