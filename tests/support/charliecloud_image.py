"""The Charliecloud image both Charliecloud test files run: the CI CPU image pulled once per
session by ``ctrain pull --runtime charliecloud docker-daemon://...`` (the real ch-convert)
into a cache under /var/tmp (the compute hosts share it), readable by the unprivileged test
user. tests/conftest.py's session fixture ``charliecloud_image`` calls it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.helpers import CTRAIN
from tests.support.images import ci_cpu_image
from tests.support.real_runs import clean_env

PULL_TIMEOUT = 900  # ch-convert unpacks 2.7 GB; minutes on the 2 shared cores
SCRIPT_DIR = "/srv"  # where the tests bind their scripts: a directory the image has
OUT_DIR = "/mnt"  # where they bind their output directory


def pull_cpu_image(root: Path) -> Path:
    """ctrain's pull of the CPU image into ``root/cache``; the image directory."""
    image = ci_cpu_image()
    cache = root / "cache"
    env = clean_env(CTRAIN_CACHE_DIR=str(cache), CTRAIN_MIN_FREE_GB="4", USER="root")
    argv = [CTRAIN, "pull", "--runtime", "charliecloud", f"docker-daemon://{image}"]
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=PULL_TIMEOUT, cwd=root
    )
    assert done.returncode == 0, done.stderr
    where = Path(done.stdout.split(" -> ")[-1].split()[0])
    assert where.is_relative_to(cache / "charliecloud") and (where / "ch" / "environment").is_file()
    for directory in (root, cache, where.parent):  # the test user reaches the image
        directory.chmod(0o755)
    return where
