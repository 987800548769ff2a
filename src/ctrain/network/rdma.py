"""The host's RDMA devices (sysfs) and what this process sees of them (``/dev``, libibverbs).

Inside a container ``/sys/class/infiniband`` still shows the host's devices, while ``/dev`` and
the libraries are the container's: the device list is the node's, the visibility this process's.
Every root is passed in, so tests build the trees in a temporary directory.

sysfs (Linux ``drivers/infiniband/core/sysfs.c``): ``class/infiniband/<dev>/ports/<n>/state``
reads ``4: ACTIVE``, ``link_layer`` ``InfiniBand`` or ``Ethernet`` (RoCE), ``rate``
``200 Gb/sec (4X HDR)``; the netdev of a RoCE port is in ``<dev>/device/net/``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

INFINIBAND = "InfiniBand"
ETHERNET = "Ethernet"  # RoCE
ACTIVE = "ACTIVE"

# Where libibverbs and its providers (``libibverbs/lib<name>-rdmav<N>.so``) live: Debian's
# multiarch directories first, then the others distributions use.
LIB_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "usr/lib/powerpc64le-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib64",
    "lib",
)
DRIVER_DIR = "etc/libibverbs.d"
# What marks a container from the inside: variables the runtimes set, files they leave.
CONTAINER_VARIABLES = {
    "APPTAINER_CONTAINER": "apptainer",
    "SINGULARITY_CONTAINER": "singularity",
    "CH_RUNNING": "charliecloud",
}
CONTAINER_FILES = {
    ".dockerenv": "docker",
    "run/.containerenv": "podman",
    ".singularity.d": "apptainer/singularity",
}


class Port(NamedTuple):
    number: int
    state: str  # "ACTIVE", "DOWN", "INIT", ... (sysfs' word after "N: ")
    link_layer: str  # "InfiniBand" or "Ethernet" (RoCE)
    rate: str  # "200 Gb/sec (4X HDR)", "" when unreadable

    @property
    def active(self) -> bool:
        return self.state == ACTIVE

    @property
    def kind(self) -> str:
        return "RoCE" if self.link_layer == ETHERNET else "IB" if self.link_layer else "?"


class Device(NamedTuple):
    name: str  # "mlx5_0"
    ports: tuple[Port, ...]
    netdevs: tuple[str, ...]  # the network interfaces of the device (RoCE: the one it uses)

    @property
    def active(self) -> bool:
        return any(port.active for port in self.ports)

    def describe(self) -> str:
        ports = ", ".join(
            f"port {p.number} {p.kind} {p.state}" + (f" {p.rate}" if p.rate else "")
            for p in self.ports
        )
        via = f" (netdev {', '.join(self.netdevs)})" if self.netdevs else ""
        return f"{self.name}: {ports or 'no ports'}{via}"


class Visibility(NamedTuple):
    """What this process sees of RDMA: device files, libibverbs, its providers."""

    uverbs: tuple[str, ...]  # /dev/infiniband/uverbs* found
    libibverbs: tuple[str, ...]  # libibverbs.so.1 found
    drivers: tuple[str, ...]  # /etc/libibverbs.d/*.driver names ("mlx5")
    providers: tuple[str, ...]  # provider libraries found ("libmlx5-rdmav34.so")
    container: str  # the runtime this process runs in, "" on the host


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _names(directory: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted(entry.name for entry in directory.iterdir()))
    except OSError:
        return ()


def parse_state(text: str) -> str:
    """``4: ACTIVE`` -> ``ACTIVE`` (the word alone when there is no number)."""
    return text.split(":", 1)[-1].strip() or "UNKNOWN"


def read_port(directory: Path) -> Port:
    return Port(
        number=int(directory.name),
        state=parse_state(_read(directory / "state")),
        link_layer=_read(directory / "link_layer"),
        rate=_read(directory / "rate"),
    )


def _netdevs(device: Path) -> tuple[str, ...]:
    """The device's interfaces: ``device/net/*``, else the names in ``gid_attrs/ndevs/*``."""
    interfaces = _names(device / "device" / "net")
    if interfaces:
        return interfaces
    names = {
        _read(entry)
        for port in _names(device / "ports")
        for entry in (device / "ports" / port / "gid_attrs" / "ndevs").glob("*")
    }
    return tuple(sorted(name for name in names if name))


def discover(sys_root: str | os.PathLike[str] = "/sys") -> tuple[Device, ...]:
    """The RDMA devices under ``<sys_root>/class/infiniband``, sorted by name."""
    base = Path(sys_root) / "class" / "infiniband"
    devices = []
    for name in _names(base):
        ports_dir = base / name / "ports"
        ports = tuple(
            sorted(
                (read_port(ports_dir / n) for n in _names(ports_dir) if n.isdigit()),
                key=lambda port: port.number,
            )
        )
        devices.append(Device(name, ports, _netdevs(base / name)))
    return tuple(devices)


def container_runtime(environ: Mapping[str, str], root: str | os.PathLike[str] = "/") -> str:
    """The container runtime this process runs in, as far as it can tell; "" on the host."""
    for variable, runtime in CONTAINER_VARIABLES.items():
        if environ.get(variable):
            return runtime
    if environ.get("container"):  # podman and systemd-nspawn set it
        return environ["container"]
    for marker, runtime in CONTAINER_FILES.items():
        if (Path(root) / marker).exists():
            return runtime
    return ""


def visibility(
    environ: Mapping[str, str],
    root: str | os.PathLike[str] = "/",
    lib_dirs: tuple[str, ...] = LIB_DIRS,
) -> Visibility:
    """What this process sees under ``root``: uverbs device files, libibverbs, its providers."""
    top = Path(root)
    uverbs = tuple(
        str(Path("/dev/infiniband") / n)
        for n in _names(top / "dev" / "infiniband")
        if n.startswith("uverbs")
    )
    libs = tuple(
        str(Path("/") / d / "libibverbs.so.1")
        for d in lib_dirs
        if (top / d / "libibverbs.so.1").exists()
    )
    drivers = tuple(
        n.removesuffix(".driver") for n in _names(top / DRIVER_DIR) if n.endswith(".driver")
    )
    providers = tuple(
        dict.fromkeys(n for d in lib_dirs for n in _names(top / d / "libibverbs") if "-rdmav" in n)
    )
    return Visibility(uverbs, libs, drivers, providers, container_runtime(environ, root))
