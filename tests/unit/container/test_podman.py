"""Podman's own argv (the rest is Docker's, pinned by golden/runtimes.json) and its host facts."""

from __future__ import annotations

import json

import pytest

from ctrain.container.docker import Docker
from ctrain.container.podman import Podman, PodmanInfo, parse_info, subid_count, subid_fix
from ctrain.container.spec import RunSpec
from ctrain.errors import SpecError
from tests.support.podman_facts import ROOTFUL_INFO, ROOTLESS_INFO, SUBUID


def spec(**kw: object) -> RunSpec:
    base: dict[str, object] = {"image": "img", "action": "exec", "command": ("true",)}
    return RunSpec(**{**base, **kw})  # type: ignore[arg-type]


def flags(argv: list[str]) -> list[str]:
    """The options before ``--entrypoint COMMAND IMAGE``."""
    return argv[: argv.index("--entrypoint")]


def test_rootful_runs_as_the_caller_without_a_user_namespace() -> None:
    argv = flags(Podman().argv(spec(user=(0, 0)), "podman"))
    assert argv[: argv.index("--workdir")] == [
        "podman",
        "run",
        "--rm",
        "--init",
        "--network",
        "host",
        "--ipc",
        "host",
        "--user",
        "0:0",
        "--security-opt",
        "label=disable",
    ]


def test_rootless_keeps_the_callers_ids() -> None:
    argv = flags(Podman().argv(spec(user=(1001, 1001)), "podman"))
    at = argv.index("--user")
    assert argv[at : at + 6] == [
        "--user",
        "1001:1001",
        "--userns",
        "keep-id",
        "--security-opt",
        "label=disable",
    ]


def test_docker_has_none_of_podmans_flags() -> None:
    argv = Docker().argv(spec(user=(1001, 1001), nv=True, gpus=("2",)), "docker")
    assert "--userns" not in argv and "--security-opt" not in argv and "--device" not in argv


@pytest.mark.parametrize(
    ("gpus", "devices", "inside"),
    [
        (None, ["nvidia.com/gpu=all"], None),
        (("2", "3"), ["nvidia.com/gpu=2", "nvidia.com/gpu=3"], "0,1"),
        (("GPU-4c2a4b3f",), ["nvidia.com/gpu=GPU-4c2a4b3f"], None),
    ],
)
def test_gpus_are_cdi_devices(
    gpus: tuple[str, ...] | None, devices: list[str], inside: str | None
) -> None:
    env = {"CUDA_VISIBLE_DEVICES": ",".join(gpus or ())}
    argv = Podman().argv(spec(nv=True, gpus=gpus, env=env), "podman")
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--device"] == devices
    assert "--gpus" not in argv
    if inside is None:  # passed through by name, as the task sees it
        assert "CUDA_VISIBLE_DEVICES" in argv
    else:  # renumbered: the container sees only its own GPUs, from 0
        assert f"CUDA_VISIBLE_DEVICES={inside}" in argv


def test_no_gpus_without_nv() -> None:
    assert "--device" not in Podman().argv(spec(gpus=("0",)), "podman")


def test_nv_on_a_task_without_gpus_is_refused() -> None:
    for runtime in (Podman(), Docker()):
        with pytest.raises(SpecError, match="sees no GPU"):
            runtime.argv(spec(nv=True, gpus=()), runtime.name)


def test_parse_info() -> None:
    rootless = parse_info(json.dumps(ROOTLESS_INFO))
    assert rootless.rootless
    assert rootless.describe() == (
        "podman 4.3.1 rootless, cgroup manager cgroupfs (cgroups v1), storage vfs, OCI runtime runc"
    )
    rootful = parse_info(json.dumps(ROOTFUL_INFO))
    assert not rootful.rootless
    assert (rootful.storage_driver, rootful.version) == ("overlay", "4.3.1")


def test_parse_info_refuses_other_output() -> None:
    with pytest.raises((ValueError, KeyError)):
        parse_info('{"host": {}}')
    with pytest.raises(ValueError):
        parse_info("Error: cannot connect")


def test_subid_count() -> None:
    assert subid_count(SUBUID, "alice", 1001) == 65536
    assert subid_count(SUBUID, "bob", 1002) == 65546  # two ranges
    assert subid_count(SUBUID, "carol", 1003) == 1000  # by uid
    assert subid_count(SUBUID, "dave", 1004) == 0
    assert subid_count("", "alice", 1001) == 0


def test_subid_fix_names_the_user_and_both_files() -> None:
    fix = subid_fix("dave")
    assert "--add-subuids 100000-165535 --add-subgids 100000-165535 dave" in fix
    assert "podman system migrate" in fix


def test_root_with_another_group_is_rootful_and_no_user_gets_no_user_namespace() -> None:
    rootful = flags(Podman().argv(spec(user=(0, 1001)), "podman"))
    assert rootful[rootful.index("--user") :] == [
        "--user",
        "0:1001",
        "--security-opt",
        "label=disable",
        "--workdir",
        "/",
    ]
    nobody = flags(Podman().argv(spec(), "podman"))
    assert "--user" not in nobody and "--userns" not in nobody
    assert nobody[nobody.index("--security-opt") : nobody.index("--workdir")] == [
        "--security-opt",
        "label=disable",
    ]


def test_parse_info_reads_every_field() -> None:
    assert parse_info(json.dumps(ROOTLESS_INFO)) == PodmanInfo(
        version="4.3.1",
        rootless=True,
        cgroup_manager="cgroupfs",
        cgroup_version="v1",
        storage_driver="vfs",
        oci_runtime="runc",
    )
    systemd = {
        "host": {
            "cgroupManager": "systemd",
            "cgroupVersion": "v2",
            "ociRuntime": {"name": "crun", "path": "/usr/bin/crun"},
            "security": {"rootless": False},
        },
        "store": {"graphDriverName": "overlay"},
        "version": {"Version": "5.4.2"},
    }
    assert parse_info(json.dumps(systemd)).describe() == (
        "podman 5.4.2 rootful, cgroup manager systemd (cgroups v2), storage overlay, "
        "OCI runtime crun"
    )


@pytest.mark.parametrize("oci", [{}, {"ociRuntime": None}, {"ociRuntime": {}}])
def test_parse_info_says_unknown_for_what_podman_leaves_out(oci: dict[str, object]) -> None:
    sparse = {
        "host": {"security": {"rootless": True}, **oci},
        "store": {},
        "version": {"Version": 5},
    }
    assert parse_info(json.dumps(sparse)).describe() == (
        "podman 5 rootless, cgroup manager unknown (cgroups unknown), storage unknown, "
        "OCI runtime unknown"
    )


def test_subid_fix_in_full() -> None:
    assert subid_fix("dave") == (
        "as root: usermod --add-subuids 100000-165535 --add-subgids 100000-165535 dave "
        "(a range no other user has, in /etc/subuid and /etc/subgid), then, as dave: "
        "podman system migrate"
    )
