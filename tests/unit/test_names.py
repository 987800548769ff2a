"""The names shared between modules and processes: launch variables, image schemes, job modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.container.apptainer import Apptainer
from ctrain.container.spec import SpecError
from ctrain.errors import ConfigError, LaunchError
from ctrain.images.build import BuildRequest, check_request
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.plan import LaunchOptions, child_environ, make_plan
from ctrain.names import JOB_MODES, Launched, Mode
from ctrain.references import (
    Operation,
    check_ref,
    is_remote,
    loopback_registry,
    runtime_reference,
    schemes,
)
from ctrain.settings import resolve
from ctrain.settings_table import SETTINGS
from tests.support.helpers import REPO

TEMPLATES = REPO / "jobs"
LAUNCHED = Launched(
    mode=Mode.MULTIWORKER,
    rank=3,
    size=4,
    local_rank=1,
    local_size=2,
    collective="nccl",
    collective_timeout=90,
)


def test_launch_variables_round_trip() -> None:
    env = LAUNCHED.to_env()
    assert Launched.from_env(env) == LAUNCHED
    assert Launched.from_env({"PATH": "/bin"}) is None


@pytest.mark.parametrize(
    "change",
    [
        {"CTRAIN_RANK": "one"},
        {"CTRAIN_LAUNCH_MODE": "bogus"},
        {"CTRAIN_LAUNCH_COLLECTIVE_TIMEOUT": ""},
    ],
)
def test_malformed_launch_variables_are_refused(change: dict[str, str]) -> None:
    with pytest.raises(LaunchError, match="malformed CTRAIN_"):
        Launched.from_env({**LAUNCHED.to_env(), **change})


def test_incomplete_launch_variables_are_refused() -> None:
    env = LAUNCHED.to_env()
    del env["CTRAIN_LAUNCH_COLLECTIVE"]
    with pytest.raises(LaunchError, match="incomplete"):
        Launched.from_env(env)


def test_no_launch_variable_is_a_setting() -> None:
    settings = {setting.env for setting in SETTINGS}
    assert not settings & set(LAUNCHED.to_env())


def test_a_nested_launch_reads_the_settings_not_the_outer_decisions(tmp_path: Path) -> None:
    """The outer launch chose nccl (it saw GPUs); the inner one is still asked for auto."""
    outer = make_plan(JobEnv.from_environ({}, "h"), LaunchOptions(), {}, ("0",))
    assert outer.collective == "nccl"
    inner_environ = {**child_environ({}, outer), "HOME": str(tmp_path)}
    inner = resolve({}, inner_environ, tmp_path)
    assert inner.collective == "auto" and inner.mode == "auto"
    assert Launched.from_env(inner_environ) == Launched(
        mode=Mode.SINGLE,
        rank=0,
        size=1,
        local_rank=0,
        local_size=1,
        collective="nccl",
        collective_timeout=600,
    )


def test_the_launch_guide_names_every_launch_variable() -> None:
    guide = (REPO / "docs" / "multi-node.md").read_text(encoding="utf-8")
    assert [name for name in LAUNCHED.to_env() if f"`{name}`" not in guide] == []


def test_job_modes_are_the_templates() -> None:
    assert sorted(JOB_MODES) == sorted(path.stem for path in TEMPLATES.glob("*.sbatch"))


# Whether ctrain takes SCHEME://... as a remote image for each operation.
OPERATIONS: tuple[Operation, ...] = ("pull", "exec", "build")
ACCEPTED = {
    # scheme          pull   exec   build
    "docker":         (True, True,  True),
    "docker-daemon":  (True, True,  True),
    "docker-archive": (True, True,  True),
    "oci-archive":    (True, True,  True),
    "oras":           (True, True,  True),
    "library":        (True, True,  True),
    "shub":           (True, True,  True),
    "http":           (True, True,  False),
    "https":          (True, True,  False),
    "ftp":            (False, False, False),
    "oci":            (False, False, False),
}  # fmt: skip
SCHEME_TABLE = [
    (scheme, operation, accepted)
    for scheme, row in ACCEPTED.items()
    for operation, accepted in zip(OPERATIONS, row, strict=True)
]


@pytest.mark.parametrize(("scheme", "operation", "accepted"), SCHEME_TABLE)
def test_scheme_table(scheme: str, operation: Operation, accepted: bool) -> None:
    assert is_remote(f"{scheme}://example.org/ctrain:1", operation) is accepted
    assert (scheme in schemes(operation)) is accepted


@pytest.mark.parametrize(("scheme", "operation", "accepted"), SCHEME_TABLE)
def test_each_operation_follows_the_table(
    scheme: str, operation: Operation, accepted: bool, tmp_path: Path
) -> None:
    """What pull, exec and build do with SCHEME://..., in the modules that do it."""
    ref = f"{scheme}://example.org/ctrain:1"
    if operation == "pull":
        if accepted:
            assert check_ref(ref, "apptainer") == runtime_reference(ref, "pull")
        else:
            with pytest.raises(ConfigError, match="cannot pull"):
                check_ref(ref, "apptainer")
    elif operation == "exec":
        assert Apptainer("apptainer").image_file(ref) == (None if accepted else ref)
    else:
        request = BuildRequest("apptainer", "apptainer", ref, str(tmp_path / "x.sif"))
        if accepted:
            check_request(request)
        else:
            with pytest.raises(SpecError, match="does not exist"):
                check_request(request)


def test_a_local_path_is_never_remote() -> None:
    for operation in OPERATIONS:
        assert not is_remote("/images/ctrain.sif", operation)
        assert not is_remote("docker:/x", operation)


@pytest.mark.parametrize(
    ("reference", "plain_http"),
    [
        ("docker://127.0.0.1:5000/org/img:1", True),
        ("docker://127.1.2.3/img", True),
        ("docker://localhost:5000/img:1", True),
        ("docker://localhost/img", True),
        ("docker://[::1]:5000/img:1", True),
        ("oras://127.0.0.1:5000/img:1-sif", True),
        ("docker://localhost:5000", False),  # no path: not a registry
        ("docker://localhost", False),  # the image "localhost" on Docker Hub
        ("docker://ubuntu:22.04", False),
        ("docker://ghcr.io/org/img:1", False),
        ("docker://10.0.0.1:5000/img", False),  # private, not loopback
        ("docker://localhost.example.org/img", False),
        ("docker://[fe80::1]:5000/img", False),
        ("docker-daemon:127.0.0.1:5000/img:1", False),  # not a registry pull
        ("library://127.0.0.1/img", False),
        ("https://127.0.0.1/img.sif", False),
        ("/tmp/127.0.0.1/img.sif", False),
    ],
)
def test_loopback_registries_are_plain_http(reference: str, plain_http: bool) -> None:
    assert loopback_registry(reference) is plain_http
