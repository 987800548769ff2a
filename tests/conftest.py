"""Markers for tests that need real services, and the run's order and background builds.

Outside CI a missing service skips the test with the reason; with CI=true it fails, so a CI run
can never pass by skipping the real Slurm, MPI, Docker, Podman, Apptainer, Charliecloud,
TensorFlow or Horovod tests, or the multi-node ones (marker ``cluster``: the compute hosts of
``make services``).

A module that needs one of the slow builds (images, SIFs, another TensorFlow's venv) says so with
the marker ``builds(NAME, ...)`` (tests/support/images/lanes.py). The run starts those builds
in the background before its first test and runs the unit tests first, then the integration
modules that need no build, then the others in the order their builds should be ready.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import scratch
from tests.support.images import background, lanes
from tests.support.users import ensure_test_user

CLUSTER_PARTITION = "cluster"  # scripts/cluster.sh: compute hosts cn01..cnNN
CLUSTER_NODES = 3  # as many as `make services` makes (NODES=3); the tests use up to 3
# /tmp is private to each compute host (docs/cluster.md); files a multi-node job shares go here.
CLUSTER_SHARED_TMP = "/var/tmp"


def _run_ok(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def missing(marker: str) -> str | None:
    """Why the service behind ``marker`` is unusable, or None when it is there."""
    if marker == "slurm":
        if not shutil.which("srun"):
            return "srun not found (make system)"
        if not _run_ok(["srun", "-n", "1", "-t", "1", "true"]):
            return "Slurm does not run jobs (make services)"
    elif marker == "cluster":
        if not shutil.which("srun"):
            return "srun not found (make system)"
        n = str(CLUSTER_NODES)
        if not _run_ok(["srun", "-p", CLUSTER_PARTITION, "-N", n, "-n", n, "-t", "1", "true"]):
            return f"no {n} compute hosts in partition {CLUSTER_PARTITION} (make services)"
    elif marker == "mpi":
        if not shutil.which("mpirun"):
            return "mpirun not found (make system)"
    elif marker == "mpich":
        if not shutil.which("mpiexec.hydra"):
            return "mpiexec.hydra not found (make system: Debian's mpich)"
    elif marker == "docker":
        if not shutil.which("docker"):
            return "docker not found (make system)"
        if not _run_ok(["docker", "info"]):
            return "the Docker engine is not running (make services)"
    elif marker == "podman":
        if not shutil.which("podman"):
            return "podman not found (make system)"
        if not _run_ok(["podman", "info"]):
            return "podman does not start (make services writes its configuration)"
    elif marker == "apptainer":
        if not shutil.which("apptainer"):
            return "apptainer not found (make system)"
        if not _run_ok(["apptainer", "--version"]):
            return "apptainer --version fails (make system installs it again)"
    elif marker == "charliecloud":
        if not shutil.which("ch-run") or not shutil.which("ch-convert"):
            return "ch-run or ch-convert not found (make system: charliecloud-runtime)"
        if not _run_ok(["ch-checkns"]):
            return "ch-checkns fails: no unprivileged user namespaces"
    elif marker == "sandbox":
        if os.geteuid() != 0:
            return "scripts/fresh-state.sh needs root"
        for tool in ("unshare", "munged", "slurmctld", "dockerd", "docker-registry", "debootstrap"):
            if not shutil.which(tool, path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"):
                return f"{tool} not found (make system)"
    elif marker in ("tensorflow", "horovod") and importlib.util.find_spec(marker) is None:
        return f"{marker} is not importable (make install)"
    return None


SERVICE_MARKERS = (
    "slurm",
    "cluster",
    "mpi",
    "mpich",
    "docker",
    "podman",
    "apptainer",
    "charliecloud",
    "sandbox",
    "tensorflow",
    "horovod",
)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in SERVICE_MARKERS:
        if item.get_closest_marker(marker) is None:
            continue
        reason = missing(marker)
        if reason is None:
            continue
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {marker} is unavailable: {reason}", pytrace=False)
        pytest.skip(reason)


def _builds(item: pytest.Item) -> set[str]:
    return {name for marker in item.iter_markers("builds") for name in marker.args}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Unit tests first, then the integration modules by when their builds should be ready (none
    first); a module's tests stay together, so its fixtures are set up once."""
    unit = Path(__file__).parent / "unit"
    keys: dict[Path, tuple[int, int]] = {}
    for item in items:
        builds = _builds(item)
        if lanes.unknown(builds):
            raise pytest.UsageError(f"{item.nodeid}: no build {sorted(lanes.unknown(builds))}")
        key = (0 if item.path.is_relative_to(unit) else 1, lanes.ready_rank(builds))
        keys[item.path] = max(keys.get(item.path, key), key)
    items.sort(key=lambda item: keys[item.path])


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Start the builds the collected tests need (when Docker runs: every build uses it)."""
    if session.config.option.collectonly or missing("docker") is not None:
        return
    wanted = set().union(*(_builds(item) for item in session.items))
    background.start(lanes.lanes(wanted))


LEFTOVERS: list[Path] = []


def pytest_sessionstart() -> None:
    """Remove the directories killed runs left under /var/tmp (tests/support/scratch.py)."""
    LEFTOVERS.extend(scratch.remove_leftovers())


def pytest_sessionfinish() -> None:
    background.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if LEFTOVERS:
        terminalreporter.write_sep("=", "removed, left by killed runs (tests/support/scratch.py)")
        for path in LEFTOVERS:
            terminalreporter.write_line(str(path))
    done = background.report()
    if done:
        terminalreporter.write_sep("=", "builds (tests/support/images)")
        for line in done:
            terminalreporter.write_line(line)


@contextlib.contextmanager
def cluster_dir() -> Iterator[Path]:
    """A fresh directory every compute host sees (under /var/tmp, as a site's shared filesystem;
    never /tmp, node-local on a real cluster), removed at the end."""
    with scratch.directory("cluster", Path(CLUSTER_SHARED_TMP)) as path:
        yield path


@pytest.fixture
def cluster_tmp() -> Iterator[Path]:
    with cluster_dir() as path:
        yield path


@pytest.fixture(scope="session")
def charliecloud_image() -> Iterator[Path]:
    """The CI CPU image as a Charliecloud directory, pulled once per session by ctrain into a
    cache every compute host sees; removed at the end (tests/support/charliecloud_image.py).
    $CTRAIN_TEST_CHARLIECLOUD_IMAGE names one converted before, used as it is."""
    from tests.support.charliecloud_image import pull_cpu_image

    given = os.environ.get("CTRAIN_TEST_CHARLIECLOUD_IMAGE")
    if given:
        yield Path(given)
        return
    with cluster_dir() as root:
        yield pull_cpu_image(root)


@pytest.fixture(scope="session")
def podman_cpu_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The CI CPU image in rootful podman's store, pushed to the local registry and pulled from it
    by `ctrain pull --runtime podman`, once per session: it stays in the store for the session, so
    a later pull of an image on it (test_foreign_images) fetches only the layers above; removed
    at the end when this session put it there."""
    from tests.support.helpers import REGISTRY, run_ctrain
    from tests.support.images import ci_cpu_image
    from tests.support.podman_cli import podman, present
    from tests.support.real_runs import clean_env

    built = ci_cpu_image()
    ref = f"{REGISTRY}/{built}"
    for argv in (["docker", "tag", built, ref], ["docker", "push", ref]):  # this checkout's
        subprocess.run(argv, capture_output=True, timeout=900, check=True)
    made = not present(ref)
    env = {**clean_env(), "CTRAIN_CACHE_DIR": str(tmp_path_factory.mktemp("podman-cache"))}
    done = run_ctrain("pull", "--runtime", "podman", ref, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith((f"pulled {ref} -> {ref} (sha256:", f"up to date: {ref}"))
    assert present(ref)
    try:
        yield ref
    finally:
        if made:
            podman("rmi", ref, check=False)


@pytest.fixture(scope="session")
def test_user() -> pwd.struct_passwd:
    """The unprivileged user ``ctrain-test`` with every group a test needs
    (tests/support/users.py)."""
    return ensure_test_user()


@pytest.fixture
def jobs_to_cancel() -> Iterator[list[str]]:
    """Slurm job ids a test submits; whatever is left of them is cancelled after the test."""
    submitted: list[str] = []
    yield submitted
    for job in submitted:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)
