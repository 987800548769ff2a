"""Podman: Docker's argv (``container/docker.py``) with podman's differences, and what
``podman info`` and the subordinate-id files say about the host (for ``ctrain doctor``).

The differences, each for a reason:

- GPUs are CDI devices, ``--device nvidia.com/gpu=N`` (or ``=all``), NVIDIA's way for podman;
  the site generates the specification once per node (``nvidia-ctk cdi generate
  --output=/etc/cdi/nvidia.yaml``). Inside, the devices are numbered from 0 again, as with
  docker's ``--gpus``.
- ``--security-opt label=disable``: on SELinux hosts (podman's usual home) a bind is otherwise
  unreadable inside, and relabelling (``:z``) would change the labels of the user's files.
- Rootless (a caller other than root): ``--userns keep-id`` maps the caller's uid and gid to
  themselves, so files written to a bind belong to the caller, as ``--user`` alone does for
  rootful podman and docker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ctrain.container.docker import Docker, wanted_gpus
from ctrain.container.spec import RunSpec

CDI_GPU = "nvidia.com/gpu"  # the device kind `nvidia-ctk cdi generate` names
SUBID_FILES = ("/etc/subuid", "/etc/subgid")
SUBID_WANTED = 65536  # what useradd grants; enough for images whose files belong to any uid


@dataclass(frozen=True)
class Podman(Docker):
    name: str = "podman"

    def _gpus(self, spec: RunSpec) -> list[str]:
        if not spec.nv:
            return []
        gpus = wanted_gpus(spec) or ("all",)
        return [arg for gpu in gpus for arg in ("--device", f"{CDI_GPU}={gpu}")]

    def _identity(self, spec: RunSpec) -> list[str]:
        rootless = spec.user is not None and spec.user[0] != 0
        keep_id = ["--userns", "keep-id"] if rootless else []
        return [*super()._identity(spec), *keep_id, "--security-opt", "label=disable"]


@dataclass(frozen=True)
class PodmanInfo:
    version: str
    rootless: bool
    cgroup_manager: str
    cgroup_version: str
    storage_driver: str
    oci_runtime: str

    def describe(self) -> str:
        mode = "rootless" if self.rootless else "rootful"
        return (
            f"podman {self.version} {mode}, cgroup manager {self.cgroup_manager} "
            f"(cgroups {self.cgroup_version}), storage {self.storage_driver}, "
            f"OCI runtime {self.oci_runtime}"
        )


INFO_ARGV = ("info", "--format", "json")


def parse_info(stdout: str) -> PodmanInfo:
    """The mode, version and drivers in ``podman info --format json``."""
    data = json.loads(stdout)
    host, store, version = data["host"], data["store"], data["version"]
    return PodmanInfo(
        version=str(version["Version"]),
        rootless=bool(host["security"]["rootless"]),
        cgroup_manager=str(host.get("cgroupManager", "unknown")),
        cgroup_version=str(host.get("cgroupVersion", "unknown")),
        storage_driver=str(store.get("graphDriverName", "unknown")),
        oci_runtime=str((host.get("ociRuntime") or {}).get("name", "unknown")),
    )


def subid_count(text: str, user: str, uid: int) -> int:
    """How many subordinate ids an /etc/subuid or /etc/subgid text grants ``user`` (by name or
    uid): the sum of the COUNT of its ``USER:START:COUNT`` lines."""
    total = 0
    for line in text.splitlines():
        fields = line.strip().split(":")
        if len(fields) != 3 or fields[0] not in (user, str(uid)) or not fields[2].isdigit():
            continue
        total += int(fields[2])
    return total


def subid_fix(user: str) -> str:
    """How to grant ``user`` the subordinate ids rootless podman needs."""
    last = 100000 + SUBID_WANTED - 1
    return (
        f"as root: usermod --add-subuids 100000-{last} --add-subgids 100000-{last} {user} "
        f"(a range no other user has, in /etc/subuid and /etc/subgid), then, as {user}: "
        "podman system migrate"
    )
