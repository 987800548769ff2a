"""A host's Podman facts, for the Podman and doctor tests: what `podman info --format json` said
rootless and rootful (podman 4.3.1, Debian 12; trimmed to a few keys), and an /etc/subuid."""

from __future__ import annotations

ROOTLESS_INFO = {
    "host": {
        "arch": "amd64",
        "cgroupManager": "cgroupfs",
        "cgroupVersion": "v1",
        "idMappings": {
            "uidmap": [
                {"container_id": 0, "host_id": 1001, "size": 1},
                {"container_id": 1, "host_id": 100000, "size": 65536},
            ]
        },
        "ociRuntime": {"name": "runc", "path": "/usr/bin/runc"},
        "security": {"rootless": True, "seccompEnabled": True, "selinuxEnabled": False},
    },
    "store": {
        "graphDriverName": "vfs",
        "graphRoot": "/home/ctrain-test/.local/share/containers/storage",
    },
    "version": {"APIVersion": "4.3.1", "Version": "4.3.1"},
}
ROOTFUL_INFO = {
    "host": {
        "cgroupManager": "cgroupfs",
        "cgroupVersion": "v1",
        "idMappings": {"gidmap": None, "uidmap": None},
        "ociRuntime": {"name": "runc", "path": "/usr/bin/runc"},
        "security": {"rootless": False, "seccompEnabled": True, "selinuxEnabled": False},
    },
    "store": {"graphDriverName": "overlay", "graphRoot": "/var/lib/containers/storage"},
    "version": {"APIVersion": "4.3.1", "Version": "4.3.1"},
}
SUBUID = (
    "# comment\nalice:100000:65536\nbob:165536:65536\n1003:231072:1000\nbob:300000:10\nbad line\n"
)
