"""cache.py and ``ctrain cache info|clean``: durations, what clean selects (images with their
sidecars, never lock files, never an image a pull holds, never the work of a running pull or
build), dry runs, and the info listing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctrain.errors import ConfigError
from ctrain.images import cache
from ctrain.images.cachedir import CacheChoice
from ctrain.images.record import Sidecar
from tests.support import fake_apptainer
from tests.support.helpers import run_ctrain, sandbox, snapshot, start_ctrain, wait_for

DAY = 86400
NOW = time.time()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * DAY),
        ("12h", 12 * 3600),
        ("2w", 14 * DAY),
        ("90m", 5400),
        ("45s", 45),
        (" 1D ", DAY),
        ("0d", 0),
    ],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert cache.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "30x", "-1d", "1.5d", "30 days", "1d2h"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        cache.parse_duration(text)
    assert "30d, 12h, 2w" in info.value.fix


def put(path: Path, data: bytes = b"x" * 5000, age_days: float = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    when = NOW - age_days * DAY
    os.utime(path, (when, when))
    return path


def sidecar_text(ref: str) -> str:
    return Sidecar(ref, "apptainer", "2026-01-01T00:00:00Z", "0.1.0", size=5000).to_json()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A cache with old and new entries of every kind."""
    r = tmp_path / "cache"
    put(r / "images" / "old.sif", age_days=40)
    put(r / "images" / "old.sif.json", sidecar_text("docker://a/old:1").encode(), age_days=1)
    put(r / "images" / "old.sif.lock", b"", age_days=40)
    put(r / "images" / "new.sif", age_days=1)
    put(r / "images" / "new.sif.json", sidecar_text("docker://a/new:1").encode(), age_days=40)
    put(r / "images" / ".new.sif.pull-1-aa", age_days=35)  # a killed pull's leftover
    put(r / "images" / "orphan.sif.json", sidecar_text("docker://a/gone:1").encode(), age_days=50)
    put(r / "cache" / "blob" / "blobs" / "sha256" / "aaaa", age_days=60)
    put(r / "cache" / "blob" / "blobs" / "sha256" / "bbbb", age_days=2)
    put(r / "cache" / "oci-tmp" / "cccc", age_days=45)
    put(r / "tmp" / "build-123" / "rootfs", age_days=31)
    engine = Sidecar("r:5000/t/bb:1", "docker", "2026-01-01T00:00:00Z", "0.1.0",
                            digest="sha256:" + "ab" * 32, image_id="sha256:1111")  # fmt: skip
    put(r / "docker" / "r_5000_t_bb_1.json", engine.to_json().encode(), age_days=1)
    return r


def removed_names(plan: cache.CleanPlan, r: Path) -> list[list[str]]:
    return sorted([str(p.relative_to(r)) for p in removal.paths] for removal in plan.removals)


def test_clean_selection(root: Path) -> None:
    plan = cache.plan_clean(root, NOW - 30 * DAY)
    assert removed_names(plan, root) == [
        ["cache/blob/blobs/sha256/aaaa"],
        ["cache/oci-tmp/cccc"],
        ["images/.new.sif.pull-1-aa"],
        ["images/old.sif", "images/old.sif.json"],  # the sidecar goes with its image
        ["images/orphan.sif.json"],
        ["tmp/build-123/rootfs"],
    ]
    assert plan.skipped == []


def test_clean_keeps_images_a_pull_holds(root: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from ctrain.util import locks
        with locks.hold_lock(Path(sys.argv[1]), "ctrain pull, pid 1 on n", print):
            print("held", flush=True)
            sys.stdin.read()
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(root / "images" / "old.sif.lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        plan = cache.plan_clean(root, NOW - 30 * DAY)
        assert ["images/old.sif", "images/old.sif.json"] not in removed_names(plan, root)
        assert [(p.name, why) for p, why in plan.skipped] == [("old.sif", "a pull holds its lock")]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_clean_keeps_the_temporary_file_of_a_running_pull(root: Path) -> None:
    fd = os.open(root / "images" / "new.sif.lock", os.O_RDWR | os.O_CREAT)
    script = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
        "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"
    )
    os.close(fd)
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(root / "images" / "new.sif.lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        plan = cache.plan_clean(root, NOW - 30 * DAY)
        assert ["images/.new.sif.pull-1-aa"] not in removed_names(plan, root)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_apply_clean_removes_and_prunes_empty_directories(root: Path) -> None:
    plan = cache.plan_clean(root, NOW - 30 * DAY)
    assert cache.apply_clean(root, plan) == []
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert left == [
        "cache",
        "cache/blob",
        "cache/blob/blobs",
        "cache/blob/blobs/sha256",
        "cache/blob/blobs/sha256/bbbb",
        "docker",
        "docker/r_5000_t_bb_1.json",
        "images",
        "images/new.sif",
        "images/new.sif.json",
        "images/old.sif.lock",
        "tmp",
    ]


def test_everything_goes_with_zero_age_but_locks(root: Path) -> None:
    plan = cache.plan_clean(root, NOW + 10)
    cache.apply_clean(root, plan)
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == [
        "images",
        "images/old.sif.lock",
        "tmp",
    ]


def test_a_missing_cache_cleans_nothing(tmp_path: Path) -> None:
    plan = cache.plan_clean(tmp_path / "nope", NOW)
    assert plan.removals == [] and cache.apply_clean(tmp_path / "nope", plan) == []


def test_disk_usage_counts_hard_links_once(tmp_path: Path) -> None:
    a = put(tmp_path / "d" / "a", b"y" * 100_000)
    os.link(a, tmp_path / "d" / "b")
    (tmp_path / "d" / "link").symlink_to("/usr")
    single = cache.disk_usage(a)
    total = cache.disk_usage(tmp_path / "d")
    assert single >= 100_000 and total < 2 * single + 64 * 1024


def test_info(root: Path) -> None:
    choice = CacheChoice(root, "env CTRAIN_CACHE_DIR", False)
    data = cache.info(choice)
    assert (data["path"], data["source"], data["exists"]) == (
        str(root),
        "env CTRAIN_CACHE_DIR",
        True,
    )
    sizes = [e["size"] for e in data["entries"]]
    assert {e["name"] for e in data["entries"]} == {"images", "cache", "tmp", "docker"}
    assert sizes == sorted(sizes, reverse=True)
    assert data["size"] == sum(e["size"] for e in data["entries"]) > 0
    refs = {item["ref"]: item for item in data["images"]}
    assert set(refs) == {
        "docker://a/old:1", "docker://a/new:1", "docker://a/gone:1", "r:5000/t/bb:1",
    }  # fmt: skip
    assert refs["r:5000/t/bb:1"]["file"] is None and refs["r:5000/t/bb:1"]["runtime"] == "docker"
    assert refs["docker://a/gone:1"]["present"] is False
    assert refs["docker://a/new:1"]["file"] == str(root / "images" / "new.sif")
    text = cache.render_info(data, as_json=False)
    assert text.splitlines()[0] == f"cache   {root}  (env CTRAIN_CACHE_DIR)"
    assert "docker://a/gone:1" in text and "(file missing)" in text
    assert (
        f"r:5000/t/bb:1  sha256:{'ab' * 32}  pulled 2026-01-01T00:00:00Z  -> docker store" in text
    )
    assert json.loads(cache.render_info(data, as_json=True)) == data


def test_info_of_a_missing_cache(tmp_path: Path) -> None:
    data = cache.info(CacheChoice(tmp_path / "none", "flag", False))
    assert data["exists"] is False and data["entries"] == [] and data["size"] == 0
    assert "does not exist yet" in cache.render_info(data, as_json=False)


# -- the CLI ------------------------------------------------------------------------------------


def ctrain_cache(r: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = sandbox(r.parent, CTRAIN_CACHE_DIR=str(r)).with_env(**extra)
    return run_ctrain("cache", *args, env=env)


def test_cli_dry_run_lists_and_removes_nothing(root: Path) -> None:
    before = snapshot(root)
    done = ctrain_cache(root, "clean", "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 7 and all(line.startswith("would remove") for line in lines[:6])
    assert any(line.endswith("images/old.sif (and its sidecar)") for line in lines)
    assert lines[-1].startswith("would free 6 entries") and lines[-1].endswith(str(root))
    assert snapshot(root) == before


def test_cli_clean_with_an_age(root: Path) -> None:
    done = ctrain_cache(root, "clean", "--older-than", "6w")
    assert done.returncode == 0, done.stderr
    removed = [line.split()[-1] for line in done.stdout.splitlines() if line.startswith("removed")]
    assert sorted(removed) == [
        "cache/blob/blobs/sha256/aaaa",
        "cache/oci-tmp/cccc",
        "images/orphan.sif.json",
    ]
    assert not (root / "images" / "orphan.sif.json").exists()
    assert (root / "images" / "old.sif").exists()


def test_cli_info_json(root: Path) -> None:
    done = ctrain_cache(root, "info", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["path"] == str(root) and data["source"] == "env CTRAIN_CACHE_DIR"
    flagged = ctrain_cache(root, "info", "--cache-dir", str(root / "images"))
    assert flagged.stdout.splitlines()[0] == f"cache   {root / 'images'}  (flag)"


WORK = [  # what a running pull or build may be using, all older than the age given
    "cache/blob/blobs/sha256/dddd",
    "tmp/build-temp-123/rootfs/etc/passwd",
    "images/tmp-copy-456",
    "images/.other.sif.build-1-abcd1234",
]


def test_cli_clean_keeps_the_work_of_a_running_pull(tmp_path: Path) -> None:
    r = tmp_path / "cache"
    for name in WORK:
        put(r / name, age_days=60)
    box = fake_apptainer.with_standin(
        tmp_path, CTRAIN_CACHE_DIR=str(r), CTRAIN_MIN_FREE_GB="1", FAKE_APPTAINER_DELAY="60"
    )
    pulling = start_ctrain("pull", "docker://registry.example/x:1", env=box.env, cwd=tmp_path)
    try:
        wait_for(lambda: any((r / "images").glob(".*.pull-*")), "the pull to start", 30)
        done = run_ctrain("cache", "clean", "--older-than", "0s", env=box.env)
        assert done.returncode == 0, done.stderr
        kept = [line for line in done.stdout.splitlines() if line.startswith("kept")]
        temp = next((r / "images").glob(".*.pull-*")).relative_to(r)
        assert sorted(line.split()[1][:-1] for line in kept) == sorted([*WORK, str(temp)])
        assert all(line.endswith(": a pull or build is using the cache") for line in kept)
        assert all((r / name).exists() for name in WORK)
    finally:
        pulling.send_signal(signal.SIGTERM)  # passed on to apptainer, which stops
        pulling.communicate(timeout=60)
    done = run_ctrain("cache", "clean", "--older-than", "0s", env=box.env)
    assert done.returncode == 0, done.stderr
    assert not any((r / name).exists() for name in WORK)


@pytest.mark.parametrize(
    ("args", "extra", "words"),
    [
        (["clean", "--older-than", "soon"], {}, "--older-than 'soon' is not a duration"),
        (["clean", "--older-than", "30"], {}, "Fix: write a number and a unit"),
        (
            ["info"],
            {"CTRAIN_CACHE_DIR": "", "SCRATCH": "", "WORK": "", "USER": ""},
            "no directory for the Apptainer cache",
        ),
        (["clean"], {"CTRAIN_ALLOW_HOME_CACHE": "maybe"}, "CTRAIN_ALLOW_HOME_CACHE='maybe'"),
    ],
)
def test_cli_bad_input(root: Path, args: list[str], extra: dict[str, str], words: str) -> None:
    before = snapshot(root)
    done = ctrain_cache(root, *args, **extra)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and " Fix: " in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert snapshot(root) == before


@pytest.mark.parametrize(
    "command",
    [
        ["pull"],
        ["overlay"],
        ["overlay", "create"],
        ["cache"],
        ["cache", "info"],
        ["cache", "clean"],
    ],
)
def test_help(command: list[str]) -> None:
    done = run_ctrain(*command, "--help", env=os.environ)
    assert done.returncode == 0 and done.stdout.startswith("Usage: ctrain " + " ".join(command))


def test_a_charliecloud_image_directory_is_one_entry(tmp_path: Path) -> None:
    r = tmp_path / "cache"
    images = r / "charliecloud"
    put(images / "new" / "usr" / "bin" / "python", age_days=400)  # old files, a new pull
    put(images / "new.json", sidecar_text("docker-daemon://a/new:1").encode(), age_days=1)
    put(images / "old" / "usr" / "bin" / "python", age_days=400)
    put(images / "old.json", sidecar_text("docker-daemon://a/old:1").encode(), age_days=1)
    for name, age in (("new", 1), ("old", 40)):
        when = NOW - age * DAY
        os.utime(images / name, (when, when))
    plan = cache.plan_clean(r, NOW - 30 * DAY)
    assert removed_names(plan, r) == [["charliecloud/old", "charliecloud/old.json"]]
    assert plan.removals[0].size >= 5000
    assert cache.apply_clean(r, plan) == []
    assert sorted(p.name for p in images.iterdir()) == ["new", "new.json"]
    assert (images / "new" / "usr" / "bin" / "python").is_file()
