"""scripts/horovod-wheel.sh: the cache key follows the patch set, and the patched sdist is the
pristine one with every patch applied (offline: a small stand-in sdist in a temporary cache)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "scripts" / "horovod-wheel.sh"
VERSION = "0.28.1"
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
    env = {
        **os.environ,
        "CTRAIN_WHEEL_CACHE": str(cache),
        "HOROVOD_PATCHES": str(patches),
        "HOROVOD_VERSION": VERSION,
    }
    return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    path = tmp_path / "patches"
    path.mkdir()
    (path / "0001-backend.patch").write_text(PATCH)
    return path


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


def key(cache: Path, patches: Path) -> str:
    done = wheel_sh("--key", "py311", "2.18.1", cache=cache, patches=patches)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_key_names_the_versions_and_changes_with_any_patch(cache: Path, patches: Path) -> None:
    first = key(cache, patches)
    assert first.startswith(f"py311-tf2.18.1-hvd{VERSION}-p")
    assert key(cache, patches) == first
    (patches / "0001-backend.patch").write_text(PATCH + " \n")
    changed = key(cache, patches)
    (patches / "0002-more.patch").write_text(PATCH)
    assert len({first, changed, key(cache, patches)}) == 3


def test_cached_finds_only_the_wheel_of_this_patch_set(cache: Path, patches: Path) -> None:
    wheel = cache / key(cache, patches) / f"horovod-{VERSION}-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    found = wheel_sh("--cached", "py311", "2.18.1", cache=cache, patches=patches)
    assert found.stdout.strip() == str(wheel)
    (patches / "0001-backend.patch").write_text(PATCH + " \n")
    found = wheel_sh("--cached", "py311", "2.18.1", cache=cache, patches=patches)
    assert found.returncode == 0 and found.stdout == ""


def test_sdist_is_the_pristine_one_with_the_patches_applied(
    tmp_path: Path, cache: Path, patches: Path
) -> None:
    done = wheel_sh("--sdist", str(tmp_path / "out"), cache=cache, patches=patches)
    assert done.returncode == 0, done.stderr
    sdist = Path(done.stdout.strip())
    assert sdist == tmp_path / "out" / f"horovod-{VERSION}.tar.gz"
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"horovod-{VERSION}/horovod/keras.py")
        assert member is not None
        assert member.read().decode() == "import tensorflow as tf\nK = tf.keras.backend\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [sdist.name]
    # the same bytes every time (an image build's cached Horovod layer stays valid): no time
    # of this run in the gzip header or on any member, the patched file included
    assert sdist.read_bytes()[4:8] == b"\0\0\0\0"
    with tarfile.open(sdist) as tar:
        assert {(m.mtime, m.uid, m.gid) for m in tar.getmembers()} == {(315532800, 0, 0)}


def test_a_patch_that_does_not_apply_stops_with_the_fix(
    tmp_path: Path, cache: Path, patches: Path
) -> None:
    (patches / "0002-stale.patch").write_text(PATCH.replace("from keras", "from kerasX"))
    done = wheel_sh("--sdist", str(tmp_path / "out"), cache=cache, patches=patches)
    assert done.returncode != 0
    assert "0002-stale.patch does not apply to horovod 0.28.1. Fix:" in done.stderr
    assert list((tmp_path / "out").glob("*.tar.gz")) == []


def test_the_repository_patch_set_is_documented() -> None:
    patch_set = sorted((REPO / "patches" / f"horovod-{VERSION}").glob("*.patch"))
    assert patch_set
    doc = (REPO / "docs" / "horovod-patches.md").read_text()
    for patch in patch_set:
        assert patch.name in doc
