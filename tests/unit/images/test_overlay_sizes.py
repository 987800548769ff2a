"""Overlay sizes and inode counts as written by a user: every unit and spelling, the bounds
exactly, and each refusal's message and fix in full."""

from __future__ import annotations

import pytest

from ctrain.errors import ConfigError
from ctrain.images import overlay

MIB = 1024**2
SIZE_FIX = "write it like 15G, 512M or 1T (binary units; a bare number is MiB)"


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("64", 64 * MIB),
        ("64M", 64 * MIB),
        ("64m", 64 * MIB),
        ("64MB", 64 * MIB),
        ("64mib", 64 * MIB),
        ("64 MiB", 64 * MIB),
        ("65536k", 64 * MIB),
        ("65536KiB", 64 * MIB),
        ("67108864K", 64 * 1024 * MIB),
        ("2g", 2048 * MIB),
        ("2GB", 2048 * MIB),
        ("0.5G", 512 * MIB),
        ("64.1M", 65 * MIB),
        ("64513K", 64 * MIB),
        ("63.01M", 64 * MIB),
        ("16T", 16 * 1024**4),
        ("16t", 16 * 1024**4),
        ("16TiB", 16 * 1024**4),
        ("\t100\n", 100 * MIB),
    ],
)
def test_size(text: str, size: int) -> None:
    assert overlay.parse_size(text) == size


@pytest.mark.parametrize(
    "text", ["", " ", "M", "1.M", ".5G", "1,5G", "15 G B", "15Gb1", "15P", "15KB1", "x15G", "1e3"]
)
def test_size_not_a_size(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        overlay.parse_size(text)
    assert caught.value.message == f"--size {text!r} is not a size"
    assert caught.value.fix == SIZE_FIX


@pytest.mark.parametrize(
    ("text", "message", "fix"),
    [
        ("63", "--size 63 is below the minimum of 64M", "give at least --size 64M"),
        ("64512K", "--size 64512K is below the minimum of 64M", "give at least --size 64M"),
        ("0G", "--size 0G is below the minimum of 64M", "give at least --size 64M"),
        ("16.001T", "--size 16.001T is above ext3's 16T", "give at most --size 16T"),
        ("16385G", "--size 16385G is above ext3's 16T", "give at most --size 16T"),
    ],
)
def test_size_out_of_bounds(text: str, message: str, fix: str) -> None:
    with pytest.raises(ConfigError) as caught:
        overlay.parse_size(text)
    assert (caught.value.message, caught.value.fix) == (message, fix)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("64", 64),
        (" 64 ", 64),
        ("1k", 1000),
        ("1K", 1000),
        ("2.5K", 2500),
        ("3m", 3_000_000),
        ("0.5M", 500_000),
        ("1 M", 1_000_000),
    ],
)
def test_inodes(text: str, count: int) -> None:
    assert overlay.parse_inodes(text) == count


@pytest.mark.parametrize("text", ["", "K", "1G", "1KB", "-64", "1e3", "64x"])
def test_inodes_not_a_count(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        overlay.parse_inodes(text)
    assert caught.value.message == f"--inodes {text!r} is not a count"
    assert caught.value.fix == "write it like 500K, 2M or 100000"


@pytest.mark.parametrize("text", ["63", "0", "0.063K", "0.00006M"])
def test_inodes_below_64(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        overlay.parse_inodes(text)
    assert caught.value.message == f"--inodes {text} is below 64"
    assert caught.value.fix == "give --inodes 64 or more"


@pytest.mark.parametrize(
    ("size", "shown"), [(64 * MIB, "131072"), (1024 * MIB, "2097152"), (100 * MIB + 512, "204801")]
)
def test_max_inodes_fill_half_the_image_at_256_bytes_each(size: int, shown: str) -> None:
    assert str(overlay.max_inodes(size)) == shown
