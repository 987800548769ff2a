"""Fake RDMA for the network tests: sysfs trees of InfiniBand and RoCE ports, and a process's
root with or without what RDMA needs (/dev/infiniband, libibverbs, its drivers and providers)."""

from __future__ import annotations

from pathlib import Path


def add_port(sys_root: Path, device: str, port: int, state: str, link: str, rate: str = "") -> Path:
    """One port under <sys_root>/class/infiniband/<device>/ports/<port>, as the kernel writes
    its files (one value and a newline)."""
    directory = sys_root / "class" / "infiniband" / device / "ports" / str(port)
    directory.mkdir(parents=True)
    (directory / "state").write_text(f"{state}\n")
    (directory / "link_layer").write_text(f"{link}\n")
    if rate:
        (directory / "rate").write_text(f"{rate}\n")
    return directory


def fake_sysfs(root: Path) -> Path:
    """An active HDR InfiniBand port, an active RoCE port on eth2, a device whose port is down."""
    sys_root = root / "sys"
    add_port(sys_root, "mlx5_0", 1, "4: ACTIVE", "InfiniBand", "200 Gb/sec (4X HDR)")
    add_port(sys_root, "mlx5_1", 1, "4: ACTIVE", "Ethernet", "100 Gb/sec (4X EDR)")
    (sys_root / "class" / "infiniband" / "mlx5_1" / "device" / "net" / "eth2").mkdir(parents=True)
    add_port(sys_root, "mlx5_2", 1, "1: DOWN", "InfiniBand", "10 Gb/sec (4X SDR)")
    return sys_root


def fake_root(root: Path, *, uverbs: bool, lib: bool, drivers: bool, providers: bool) -> Path:
    """A container's / (or a host's) with what RDMA needs, each part optional."""
    if uverbs:
        (root / "dev" / "infiniband").mkdir(parents=True)
        for name in ("uverbs0", "uverbs1", "rdma_cm"):
            (root / "dev" / "infiniband" / name).touch()
    libdir = root / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True, exist_ok=True)
    if lib:
        (libdir / "libibverbs.so.1").touch()
    if providers:
        (libdir / "libibverbs").mkdir()
        (libdir / "libibverbs" / "libmlx5-rdmav34.so").touch()
        (libdir / "libibverbs" / "libefa-rdmav34.so").touch()
    if drivers:
        (root / "etc" / "libibverbs.d").mkdir(parents=True)
        (root / "etc" / "libibverbs.d" / "mlx5.driver").write_text("driver mlx5\n")
    return root
