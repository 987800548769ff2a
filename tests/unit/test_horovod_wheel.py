"""scripts/horovod-wheel.sh: the cache key follows the patch set, and the patched sdist is the
pristine one with the patches its series lists for the TensorFlow applied (offline: a small
stand-in sdist in a temporary cache)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from ctrain import matrix
from tests.support.helpers import REPO

SCRIPT = REPO / "scripts" / "horovod-wheel.sh"
VERSION = "0.28.1"
OLD, NEW = "2.18.1", "2.21.0"  # rows of the matrix below and from 2.19 on
LATER = """\
Another header.

--- a/horovod/keras.py
+++ b/horovod/keras.py
@@ -1,2 +1,3 @@
 import tensorflow as tf
 K = tf.keras.backend
+NEW = True
"""
PATCH = """\
A header line the patch tool skips.

--- a/horovod/keras.py
+++ b/horovod/keras.py
@@ -1,2 +1,2 @@
 import tensorflow as tf
-from keras import backend as K
+K = tf.keras.backend
"""


def wheel_sh(*args: str, cache: Path, patches: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CTRAIN_WHEEL_CACHE": str(cache), "HOROVOD_PATCHES": str(patches)}
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    path = tmp_path / "patches"
    path.mkdir()
    (path / "0001-backend.patch").write_text(PATCH)
    (path / "series").write_text("# a comment\n0001-backend.patch  all\n")
    return path


def add(patches: Path, name: str, text: str, spec: str = "all") -> None:
    (patches / name).write_text(text)
    with (patches / "series").open("a") as series:
        series.write(f"{name} {spec}\n")


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A wheel cache holding a stand-in for the pristine sdist."""
    tree = tmp_path / "src" / f"horovod-{VERSION}" / "horovod"
    tree.mkdir(parents=True)
    (tree / "keras.py").write_text("import tensorflow as tf\nfrom keras import backend as K\n")
    sdist = tmp_path / "cache" / "sdist" / f"horovod-{VERSION}.tar.gz"
    sdist.parent.mkdir(parents=True)
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree.parent, arcname=f"horovod-{VERSION}")
    return tmp_path / "cache"


def key(cache: Path, patches: Path, tf: str = OLD) -> str:
    done = wheel_sh("--key", "py311", tf, cache=cache, patches=patches)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_key_names_the_versions_and_changes_with_any_patch(cache: Path, patches: Path) -> None:
    first = key(cache, patches)
    assert first.startswith(f"py311-tf2.18.1-hvd{VERSION}-p")
    assert key(cache, patches) == first
    (patches / "0001-backend.patch").write_text(PATCH + " \n")
    changed = key(cache, patches)
    add(patches, "0002-more.patch", PATCH)
    assert len({first, changed, key(cache, patches)}) == 3


def test_a_patch_outside_its_range_leaves_the_key_alone(cache: Path, patches: Path) -> None:
    old, new = key(cache, patches, OLD), key(cache, patches, NEW)
    add(patches, "0002-later.patch", LATER, ">=2.19")
    assert key(cache, patches, OLD) == old
    assert key(cache, patches, NEW) not in (new, old)
    (patches / "0003-unlisted.patch").write_text(PATCH)  # not in the series: never applied
    assert key(cache, patches, OLD) == old


def test_a_tensorflow_outside_the_matrix_is_refused_with_the_fix(
    cache: Path, patches: Path
) -> None:
    done = wheel_sh("--key", "py311", "2.17.0", cache=cache, patches=patches)
    assert done.returncode != 0
    assert "TensorFlow 2.17.0 is not in ctrain's version matrix. Fix: TF_VERSION=" in done.stderr


def test_cached_finds_only_the_wheel_of_this_patch_set(cache: Path, patches: Path) -> None:
    wheel = cache / key(cache, patches) / f"horovod-{VERSION}-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    found = wheel_sh("--cached", "py311", OLD, cache=cache, patches=patches)
    assert found.stdout.strip() == str(wheel)
    (patches / "0001-backend.patch").write_text(PATCH + " \n")
    found = wheel_sh("--cached", "py311", OLD, cache=cache, patches=patches)
    assert found.returncode == 0 and found.stdout == ""


def patched_keras(sdist: Path) -> str:
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"horovod-{VERSION}/horovod/keras.py")
        assert member is not None
        return member.read().decode()


def test_the_sdist_gets_the_patches_of_its_tensorflow(
    tmp_path: Path, cache: Path, patches: Path
) -> None:
    add(patches, "0002-later.patch", LATER, ">=2.19")
    for tf, last in ((OLD, "K = tf.keras.backend\n"), (NEW, "NEW = True\n")):
        done = wheel_sh("--sdist", str(tmp_path / tf), tf, cache=cache, patches=patches)
        assert done.returncode == 0, done.stderr
        assert patched_keras(Path(done.stdout.strip())).endswith(last)


def test_sdist_is_the_pristine_one_with_the_patches_applied(
    tmp_path: Path, cache: Path, patches: Path
) -> None:
    done = wheel_sh("--sdist", str(tmp_path / "out"), OLD, cache=cache, patches=patches)
    assert done.returncode == 0, done.stderr
    sdist = Path(done.stdout.strip())
    assert sdist == tmp_path / "out" / f"horovod-{VERSION}.tar.gz"
    assert patched_keras(sdist) == "import tensorflow as tf\nK = tf.keras.backend\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [sdist.name]
    # the same bytes every time (an image build's cached Horovod layer stays valid): no time
    # of this run in the gzip header or on any member, the patched file included
    assert sdist.read_bytes()[4:8] == b"\0\0\0\0"
    with tarfile.open(sdist) as tar:
        assert {(m.mtime, m.uid, m.gid) for m in tar.getmembers()} == {(315532800, 0, 0)}


def test_a_patch_that_does_not_apply_stops_with_the_fix(
    tmp_path: Path, cache: Path, patches: Path
) -> None:
    add(patches, "0002-stale.patch", PATCH.replace("from keras", "from kerasX"))
    done = wheel_sh("--sdist", str(tmp_path / "out"), OLD, cache=cache, patches=patches)
    assert done.returncode != 0
    assert "0002-stale.patch does not apply to horovod 0.28.1. Fix:" in done.stderr
    assert list((tmp_path / "out").glob("*.tar.gz")) == []


def test_the_repository_patch_set_is_listed_and_documented() -> None:
    """Every patch file is in the series (none is silently never applied) and in the docs, and
    every TensorFlow of the matrix gets the patches of its range."""
    directory = REPO / "patches" / f"horovod-{VERSION}"
    patch_set = sorted(p.name for p in directory.glob("*.patch"))
    series = (directory / "series").read_text()
    listed = {name for row in matrix.load() for name in matrix.series(series, row.tensorflow)}
    assert patch_set and sorted(listed) == patch_set
    doc = (REPO / "docs" / "horovod-patches.md").read_text()
    for name in patch_set:
        assert name in doc
    assert matrix.series(series, OLD) == patch_set[:3]
    assert matrix.series(series, NEW) == patch_set
