"""Argv and environment of every runtime for every option combination, against a golden file.

Regenerate after an intended change:
    CTRAIN_REGEN_GOLDEN=1 pytest tests/unit/container/test_runtimes.py
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
from pathlib import Path

import pytest

from ctrain.container.docker import mount
from ctrain.container.runtimes import Request, choose_runtime, plan_invocation, runtime_named
from ctrain.container.spec import Bind, parse_bind
from ctrain.errors import CtrainError, SpecError
from ctrain.releases import RuntimeVersion, parse_version
from ctrain.util.envpairs import parse_env_file
from tests.support.helpers import REPO
from tests.support.host_env import HOST_ENV

GOLDEN = REPO / "tests" / "unit" / "golden" / "runtimes.json"


def which(name: str) -> str:
    return f"/usr/bin/{name}"


def version_of(program: str) -> RuntimeVersion:
    """The releases the stand-in reports by default (tests/support/fake_apptainer.py)."""
    flavour = "singularity-ce version 4.5.1" if program.endswith("singularity") else ""
    return parse_version(flavour or "apptainer version 1.4.5", program)


def combos() -> list[tuple[str, str, bool, bool, str | None]]:
    return list(
        itertools.product(
            ("apptainer", "singularity", "docker", "podman", "host"),
            ("exec", "run", "shell"),
            (False, True),  # --nv
            (False, True),  # binds
            (None, "ov.img", "ov.img:ro"),
        )
    )


def outcome(
    tmp: Path, runtime: str, action: str, nv: bool, binds: bool, overlay: str | None
) -> object:
    data = tmp / "data"
    request = Request(
        runtime=runtime,
        action=action,  # type: ignore[arg-type]
        image=str(tmp / "img.sif"),
        command=("python", "train.py", "--lr", "0.1") if action != "shell" else (),
        nv=nv,
        binds=(f"{data}:/data:ro", f"{data}:/out") if binds else (),
        overlay=str(tmp / overlay) if overlay else None,
        env_pairs=("EXTRA=a,b",),
        cwd="/work",
        user=(1000, 100),
        python="/venv/bin/python",
    )
    try:
        invocation = plan_invocation(request, HOST_ENV, which, ("2", "3"), version_of=version_of)
    except CtrainError as exc:
        return {"error": exc.message.replace(str(tmp), "TMP")}
    added_to_process = {k: v for k, v in invocation.env.items() if HOST_ENV.get(k) != v}
    return {
        "argv": [a.replace(str(tmp), "TMP") for a in invocation.argv],
        "process_env_added": added_to_process,
    }


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    (tmp_path / "img.sif").write_bytes(b"SIF")
    (tmp_path / "ov.img").write_bytes(b"")
    return tmp_path


def test_golden(files: Path) -> None:
    found = {"/".join(map(str, combo)): outcome(files, *combo) for combo in combos()}
    if os.environ.get("CTRAIN_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    expected = json.loads(GOLDEN.read_text())
    assert found.keys() == expected.keys()
    for key in found:
        assert found[key] == expected[key], key


def test_host_variables_never_leak_into_containers(files: Path) -> None:
    for runtime in ("apptainer", "docker"):
        result = outcome(files, runtime, "exec", False, False, None)
        assert isinstance(result, dict)
        flat = json.dumps(result)
        assert "PYTHONPATH" not in flat and "LD_LIBRARY_PATH" not in flat
        assert "TF_CLI_CONFIG_FILE" not in flat


@pytest.mark.parametrize(
    "path",
    ["/tmp/with space", "/tmp/quote'and\"double", "/tmp/new\nline", "/tmp/comma,colon"],
)
def test_docker_mount_round_trips_weird_paths(path: str) -> None:
    fields = next(csv.reader(io.StringIO(mount(Bind(path, "/data", "ro")))))
    assert fields == ["type=bind", f"source={path}", "target=/data", "readonly"]


@pytest.mark.parametrize("path", ["/tmp/with space", "/tmp/quote'and\"double", "/tmp/new\nline"])
def test_apptainer_keeps_weird_paths_as_one_argument(tmp_path: Path, path: str) -> None:
    src = tmp_path / path.lstrip("/")
    src.mkdir(parents=True)
    (tmp_path / "i.sif").write_bytes(b"")
    request = Request(
        "apptainer",
        "exec",
        str(tmp_path / "i.sif"),
        ("true",),
        binds=(f"{src}:/data:ro",),
        launch=False,
    )
    argv = plan_invocation(request, {}, which, None, version_of=version_of).argv
    assert f"{src}:/data:ro" in argv


def test_apptainer_refuses_colons_in_bind_paths(tmp_path: Path) -> None:
    src = tmp_path / "a,b"
    src.mkdir()
    (tmp_path / "i.sif").write_bytes(b"")
    request = Request("apptainer", "exec", str(tmp_path / "i.sif"), ("true",), binds=(str(src),))
    with pytest.raises(SpecError, match="cannot express"):
        plan_invocation(request, {}, which, None, version_of=version_of)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("/data:rw", "directory called 'rw'"),
        ("/data:ro", "directory called 'ro'"),
        ("/data:data", "not absolute"),
        ("/data:/d:rx", "mode must be ro or rw"),
        (":/d", "not SRC"),
        ("/a:/b:ro:x", "not SRC"),
    ],
)
def test_bad_binds(text: str, words: str) -> None:
    with pytest.raises(SpecError, match=words) as caught:
        parse_bind(text)
    assert caught.value.fix


def test_bind_defaults() -> None:
    assert parse_bind("/data") == Bind("/data", "/data", "rw")
    assert parse_bind("/data:/in:ro") == Bind("/data", "/in", "ro")


def test_missing_paths_are_refused_before_launch(tmp_path: Path) -> None:
    (tmp_path / "i.sif").write_bytes(b"")
    for request, words in [
        (Request("docker", "exec", "img", ("x",), binds=(str(tmp_path / "nope"),)), "bind source"),
        (
            Request(
                "apptainer",
                "exec",
                str(tmp_path / "i.sif"),
                ("x",),
                overlay=str(tmp_path / "nope.img"),
            ),
            "overlay",
        ),
        (Request("apptainer", "exec", str(tmp_path / "missing.sif"), ("x",)), "image"),
    ]:
        with pytest.raises(SpecError, match=words):
            plan_invocation(request, {}, which, None, version_of=version_of)


def test_read_write_overlay_in_a_multi_task_step_is_refused(tmp_path: Path) -> None:
    (tmp_path / "i.sif").write_bytes(b"")
    (tmp_path / "o.img").write_bytes(b"")
    base = dict(runtime="apptainer", action="exec", image=str(tmp_path / "i.sif"), command=("x",))
    step = {"SLURM_STEP_NUM_TASKS": "8"}
    with pytest.raises(SpecError, match="8 tasks") as caught:
        plan_invocation(
            Request(**base, overlay=str(tmp_path / "o.img")),
            step,
            which,
            None,
            version_of=version_of,
        )  # type: ignore[arg-type]
    assert ":ro" in caught.value.fix
    plan_invocation(
        Request(**base, overlay=f"{tmp_path / 'o.img'}:ro"),
        step,
        which,
        None,
        version_of=version_of,
    )  # type: ignore[arg-type]


def test_env_file() -> None:
    text = "# comment\n\nA=1\nexport B=two words\nC=\n"
    assert parse_env_file(text, "f") == {"A": "1", "B": "two words", "C": ""}
    with pytest.raises(SpecError, match="f:2:"):
        parse_env_file("A=1\nnot a pair\n", "f")


@pytest.mark.parametrize(
    ("requested", "present", "expected"),
    [
        ("auto", {"apptainer", "docker"}, "apptainer"),
        ("auto", {"singularity", "docker"}, "singularity"),
        ("auto", {"docker", "podman"}, "docker"),
        ("auto", {"podman"}, "podman"),
        ("docker", {"apptainer", "docker"}, "docker"),
        ("host", set(), "host"),
    ],
)
def test_choose_runtime(requested: str, present: set[str], expected: str) -> None:
    runtime, _ = choose_runtime(requested, lambda n: f"/bin/{n}" if n in present else None)
    assert runtime is runtime_named(expected)


def test_no_runtime_found_suggests_host() -> None:
    with pytest.raises(CtrainError, match="no container runtime") as caught:
        choose_runtime("auto", lambda n: None)
    assert "--runtime host" in caught.value.fix


# What a rank needs inside the container to find its place: written out, not taken from spec.py.
RANK_ENV = {
    "PMI_RANK": "3",
    "PMI_SIZE": "4",
    "PMIX_RANK": "3",
    "PMIX_NAMESPACE": "slurm.pmix.42.0",
    "SLURM_PROCID": "3",
    "SLURM_STEP_NUM_TASKS": "4",
    "OMPI_COMM_WORLD_RANK": "3",
    "HOROVOD_RANK": "3",
    "TF_CONFIG": '{"cluster":{"worker":["a:1","b:2"]},"task":{"type":"worker","index":1}}',
    "NCCL_SOCKET_IFNAME": "eth0",
    "CTRAIN_MODE": "horovod",
}


@pytest.mark.parametrize("runtime", ["apptainer", "singularity", "docker", "podman"])
def test_launcher_variables_reach_the_container(files: Path, runtime: str) -> None:
    """Apptainer gets each as <PREFIX>NAME=value (--cleanenv drops the rest); Docker and Podman
    get `-e NAME` and read the value from their own environment."""
    request = Request(runtime, "exec", str(files / "img.sif"), ("python", "t.py"), launch=False)
    invocation = plan_invocation(
        request, {"PATH": "/usr/bin", **RANK_ENV}, which, None, version_of=version_of
    )
    if runtime in ("apptainer", "singularity"):
        prefix = "SINGULARITYENV_" if runtime == "singularity" else "APPTAINERENV_"
        assert "--cleanenv" in invocation.argv
        for name, value in RANK_ENV.items():
            assert invocation.env[prefix + name] == value
    else:
        passed = {invocation.argv[i + 1] for i, a in enumerate(invocation.argv) if a == "-e"}
        assert set(RANK_ENV) <= passed
        for name, value in RANK_ENV.items():
            assert invocation.env[name] == value
