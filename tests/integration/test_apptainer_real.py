"""ctrain on the real Apptainer (Debian's 1.4.5, `make system`: scripts/apptainer.sh), as root and
as the unprivileged user ``ctrain-test``: pulls from the Docker daemon and from the local
registry (plain HTTP on loopback), an interrupted pull, exec's environment byte for byte and
--cleanenv, binds, the working directory, exit codes and signals, the image's runscript, --nv on
a machine without GPUs, overlays locked as Apptainer locks them, and `ctrain launch` inside the
container under srun, on this host and across the compute hosts.

Two images: busybox alone (a 1 MB SIF) and ctrain-min (Debian + Python + ctrain's source, no
TensorFlow), each pulled once per module into a cache every compute host and the test user
see (under /var/tmp)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain import references
from ctrain.images import sif_header
from ctrain.images.record import IMAGES_DIR, archive_stamp, sidecar_of
from tests.conftest import CLUSTER_PARTITION, cluster_dir
from tests.support import passthrough
from tests.support.helpers import (
    CTRAIN,
    REGISTRY,
    SYSTEM_PATH,
    need,
    registry_up,
    run_ctrain,
    wait_for,
)
from tests.support.images import busybox_base, ctrain_min_image
from tests.support.real_runs import clean_env, run
from tests.support.users import TEST_USER, user_source

TIMEOUT = 180
RUNUSER = "/usr/sbin/runuser"  # util-linux's, where Debian keeps it
EXEC = [CTRAIN, "exec", "--runtime", "apptainer", "--no-launch"]
pytestmark = [pytest.mark.apptainer, pytest.mark.docker, pytest.mark.timeout(4 * TIMEOUT)]
# An env value with everything a shell would evaluate or split.
TRICKY = "a, b $HOME `echo hi` \"double\" 'single'  two  spaces\nsecond line\\"
SHOW_TRICKY = "import os, sys; sys.stdout.buffer.write(os.environb[b'TRICKY'])"


def ctrain(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    return run_ctrain(*args, env=env or clean_env(), cwd=cwd, timeout=timeout)


def exec_(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return ctrain(*EXEC[1:], *args, cwd=cwd, env=env)


def pull(ref: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(CTRAIN_CACHE_DIR=str(cache), CTRAIN_MIN_FREE_GB="1")
    return ctrain(
        "pull", "--runtime", "apptainer", *args, ref, cwd=cache.parent, env=env, timeout=600
    )


def pulled(ref: str, root: Path) -> Path:
    """``ref`` pulled into the module's cache, readable by the test user."""
    done = pull(ref, root / "cache")
    assert done.returncode == 0, done.stderr
    # "pulled REF -> PATH", or "up to date: PATH, pulled ..." after a test's pull into that cache
    said = done.stdout.removeprefix("up to date: ").split(", pulled ")[0]
    where = Path(said.split(" -> ")[-1].strip())
    for directory in (root / "cache", where.parent):
        directory.chmod(0o755)
    return where


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    """A directory under /var/tmp the compute hosts and the test user can read."""
    with cluster_dir() as path:
        path.chmod(0o755)
        yield path


@pytest.fixture(scope="module")
def busybox(root: Path) -> Path:
    return pulled(f"docker-daemon://{busybox_base()}", root)


@pytest.fixture(scope="module")
def min_sif(root: Path) -> Path:
    return pulled(f"docker-daemon://{ctrain_min_image()}", root)


# ---- the wrapper (scripts/apptainer-enter.sh) -------------------------------------------------


@pytest.mark.parametrize("cwd", ["/", "/bin", "/usr/lib", "/usr/share/doc"])
def test_apptainer_starts_from_any_working_directory(cwd: str) -> None:
    """A working directory under the root's own /usr is not bound over it (the host's /usr/bin
    would replace apptainer and its libraries)."""
    done = subprocess.run(
        ["apptainer", "--version"], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("apptainer version "), done.stdout


# The root's own top-level directories, which the wrapper never binds over.
SYSTEM_DIRS = {"bin", "boot", "etc", "lib", "lib32", "lib64", "libx32", "sbin", "usr", "var"}


def host_top_level_dirs() -> list[str]:
    return sorted(
        entry.path
        for entry in os.scandir("/")
        if entry.is_dir() and entry.name not in SYSTEM_DIRS and not entry.name.startswith(".")
    )


@pytest.mark.parametrize("who", ["root", TEST_USER])
def test_every_top_level_directory_of_the_host_is_where_the_caller_sees_it(
    who: str, busybox: Path, test_user: pwd.struct_passwd
) -> None:
    """Apptainer installed on a host sees the host's whole tree: a SIF, a checkout or a bind
    source is found wherever a site keeps it (CI's checkout lives outside /work, say), not only
    under the working directory. Each directory, bound into the container from / (where the
    working directory binds nothing), is the host's own: same device, same inode."""
    user = [] if who == "root" else [RUNUSER, "-u", TEST_USER, "--"]
    unsquash = [] if who == "root" else ["--unsquash"]  # no /dev/fuse for users here
    env = clean_env(HOME="/root" if who == "root" else test_user.pw_dir)
    for directory in host_top_level_dirs():
        done = subprocess.run(
            [*user, "apptainer", "exec", *unsquash, "-B", f"{directory}:/ctrain-host-dir",
             str(busybox), "sh", "-c", "busybox stat -c '%d %i' /ctrain-host-dir"],
            env=env, cwd="/", capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert done.returncode == 0, f"{directory}: {done.stderr}"
        host = os.stat(directory)
        assert done.stdout.split() == [str(host.st_dev), str(host.st_ino)], directory


# ---- pull ----------------------------------------------------------------------------------


def test_a_docker_daemon_pull_is_one_whole_sif_reused_the_second_time(
    busybox: Path, root: Path
) -> None:
    assert sif_header.sif_problem(busybox.read_bytes()[:4096], busybox.stat().st_size) is None
    record = json.loads(sidecar_of(busybox).read_text())
    assert record["ref"] == f"docker-daemon:{busybox_base()}"  # the form apptainer pull takes
    again = pull(f"docker-daemon://{busybox_base()}", root / "cache")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"up to date: {busybox}"), again.stdout
    assert "Starting build" not in again.stderr  # apptainer did not run
    leftovers = [p.name for p in busybox.parent.iterdir() if ".pull-" in p.name]
    assert leftovers == []
    inspected = subprocess.run(
        ["apptainer", "inspect", "--json", str(busybox)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["type"] == "container"


def test_a_loopback_registry_is_pulled_over_plain_http(root: Path, tmp_path: Path) -> None:
    """Apptainer speaks HTTPS to every registry unless told --no-https ("server gave HTTP
    response to HTTPS client"); ctrain tells it for a registry on the loopback interface."""
    ref = registry_image("apptainer-busybox")
    plain = subprocess.run(
        ["apptainer", "pull", "--disable-cache", str(tmp_path / "plain.sif"), f"docker://{ref}"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert plain.returncode == 255
    assert "server gave HTTP response to HTTPS client" in plain.stderr
    done = pull(f"docker://{ref}", tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    where = Path(done.stdout.split(" -> ")[-1].strip())
    ran = exec_(str(where), "--", "sh", "-c", "echo from-the-registry", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "from-the-registry\n"


def unlocked(images: Path) -> set[str]:
    """The names in a cache's images directory, its locks left out."""
    return {p.name for p in images.glob("*") if not p.name.endswith(".lock")}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_pull_leaves_nothing_and_the_next_one_pulls(
    signum: signal.Signals, root: Path, tmp_path: Path
) -> None:
    """Apptainer removes its build-temp-* under SIGTERM and SIGINT alike, and ctrain leaves no
    part of the SIF. Only SIGTERM's case then pulls again into that cache: ctrain handles both
    signals alike (tests/unit/images/test_stop.py), and both leave the cache as asserted here.
    It pulls into the module's cache, where min_sif then finds the SIF up to date, unless the
    image is there already (then into this test's own)."""
    image = ctrain_min_image()
    pulls_again = signum == signal.SIGTERM
    shared = root / "cache"
    filled = (shared / IMAGES_DIR / references.image_filename(f"docker-daemon:{image}")).exists()
    cache = shared if pulls_again and not filled else tmp_path / "cache"
    images = cache / IMAGES_DIR
    before = unlocked(images)  # in the module's cache: what other tests pulled there
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = clean_env(CTRAIN_CACHE_DIR=str(cache), CTRAIN_MIN_FREE_GB="1", TMPDIR=str(tmpdir))
    argv = [CTRAIN, "pull", "--runtime", "apptainer", f"docker-daemon://{image}"]
    proc = subprocess.Popen(
        argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # apptainer is at work once it says so
        if "Extracting OCI image" in line or "Creating SIF file" in line:
            break
    proc.send_signal(signum)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert unlocked(images) == before
    assert list(tmpdir.iterdir()) == []  # apptainer's build-temp-* removed too
    if not pulls_again:
        return
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"pulled docker-daemon:{image} -> ")


def registry_image(name: str) -> str:
    """busybox pushed to the local registry under ``name``, a tag no other run uses."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    ref = f"{REGISTRY}/ctrain-test/{name}:{os.getpid()}-{time.monotonic_ns()}"
    for argv in (["docker", "tag", busybox_base(), ref], ["docker", "push", ref]):
        subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=True)
    subprocess.run(["docker", "image", "rm", ref], capture_output=True, timeout=TIMEOUT)
    return ref


def save_archive(scheme: str, path: Path) -> None:
    """busybox as ``scheme``'s file at ``path``: docker's own save, or podman's OCI archive."""
    if scheme == "docker-archive":
        argv = [["docker", "save", "-o", str(path), busybox_base()]]
    else:
        loaded = f"localhost/{busybox_base()}"
        argv = [
            ["docker", "save", "-o", str(path.with_suffix(".docker")), busybox_base()],
            ["podman", "load", "-i", str(path.with_suffix(".docker"))],
            ["podman", "save", "--format", "oci-archive", "-o", str(path), loaded],
            ["podman", "image", "rm", loaded],
        ]
    for command in argv:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
        assert done.returncode == 0, f"{command}: {done.stderr}"


@pytest.mark.parametrize(
    "scheme", ["docker-archive", pytest.param("oci-archive", marks=pytest.mark.podman)]
)
def test_an_archive_is_pulled_by_its_path_and_again_when_it_changes(
    scheme: str, tmp_path: Path
) -> None:
    archive = tmp_path / "saved image.tar"  # a space: a path, not a registry name
    save_archive(scheme, archive)
    env = clean_env(CTRAIN_CACHE_DIR=str(tmp_path / "cache"), CTRAIN_MIN_FREE_GB="1")

    def pulls(ref: str) -> subprocess.CompletedProcess[str]:
        argv = ("pull", "--runtime", "apptainer", ref)
        return ctrain(*argv, cwd=tmp_path, env=env, timeout=300)

    first = pulls(f"{scheme}:{archive.name}")  # relative to the working directory
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"pulled {scheme}:{archive} -> "), first.stdout
    target = Path(first.stdout.split(" -> ")[-1].strip())
    record = json.loads(sidecar_of(target).read_text())
    info = archive.stat()
    assert record["source_stamp"] == archive_stamp(info.st_size, info.st_mtime_ns, info.st_ino)
    ran = exec_(str(target), "--", "sh", "-c", "echo from-the-archive", cwd=tmp_path)
    assert (ran.returncode, ran.stdout) == (0, "from-the-archive\n"), ran.stderr
    again = pulls(f"{scheme}://{archive}")  # the same file, written the other way
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"up to date: {target}"), again.stdout
    archive.unlink()
    save_archive(scheme, archive)  # a new file at the same path
    renewed = pulls(f"{scheme}:{archive}")
    assert renewed.returncode == 0, renewed.stderr
    assert "the archive changed since the pull" in renewed.stderr, renewed.stderr
    assert renewed.stdout.startswith(f"pulled {scheme}:{archive} -> {target}"), renewed.stdout
    colon = tmp_path / "a:b.tar"
    archive.rename(colon)  # the archive is gone: the pull's record is trusted, as offline
    kept = pulls(f"{scheme}:{archive}")
    assert kept.returncode == 0 and kept.stdout.startswith(f"up to date: {target}"), kept.stderr
    refused = pulls(f"{scheme}:{colon}")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "an image inside the archive" in refused.stderr, refused.stderr
    missing = pulls(f"{scheme}:{tmp_path / 'never.tar'}")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert f"no archive at {tmp_path / 'never.tar'} to pull" in missing.stderr, missing.stderr


def test_an_oras_sif_is_pulled_byte_for_byte(busybox: Path, tmp_path: Path) -> None:
    """`apptainer push` of a SIF to the local registry (ORAS), then `ctrain pull oras://`: the
    very file. Apptainer reaches a loopback registry over plain HTTP for oras:// with or without
    --no-https (measured: it is "for docker://" in its help)."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    ref = f"oras://{REGISTRY}/ctrain-test/busybox-sif:{os.getpid()}-{time.monotonic_ns()}"
    pushed = subprocess.run(
        ["apptainer", "push", str(busybox), ref], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert pushed.returncode == 0, pushed.stderr
    done = pull(ref, tmp_path / "cache")
    assert done.returncode == 0, done.stderr
    where = Path(done.stdout.split(" -> ")[-1].strip())
    assert where.read_bytes() == busybox.read_bytes()
    again = pull(ref, tmp_path / "cache")
    assert again.stdout.startswith(f"up to date: {where}"), again.stdout


def test_two_pulls_at_once_download_once(tmp_path: Path) -> None:
    """The second pull waits on the first's lock, then finds the file up to date. The first is
    stopped (SIGSTOP) as soon as it holds the lock, until the second says it waits: the
    second's start, however slow on a busy machine, cannot come after the first's end, whatever
    the pull's length: busybox's 1 MB SIF will do."""
    ref = f"docker-daemon://{busybox_base()}"
    env = clean_env(CTRAIN_CACHE_DIR=str(tmp_path / "cache"), CTRAIN_MIN_FREE_GB="1")
    argv = [CTRAIN, "pull", "--runtime", "apptainer", ref]

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    first = start()
    assert first.stderr is not None
    said = []
    for line in first.stderr:  # the lock is held and apptainer is at work
        said.append(line)
        if line.startswith("ctrain: pulling "):
            break
    assert said and said[-1].startswith("ctrain: pulling "), "".join(said)
    os.kill(first.pid, signal.SIGSTOP)  # apptainer goes on; ctrain keeps the lock
    try:
        second = start()
        assert second.stderr is not None
        waited = []
        for line in second.stderr:
            waited.append(line)
            if "waiting for another pull of " in line:
                break
    finally:
        os.kill(first.pid, signal.SIGCONT)
    first_out, first_err = first.communicate(timeout=600)
    second_out, second_err = second.communicate(timeout=600)
    second_err = "".join(waited) + second_err
    assert first.returncode == 0, "".join(said) + first_err
    assert second.returncode == 0, second_err
    assert first_out.startswith("pulled ") and second_out.startswith("up to date: "), second_out
    assert "waiting for another pull of " in second_err, second_err
    assert "Creating SIF file" not in second_err  # apptainer ran once
    images = tmp_path / "cache" / IMAGES_DIR
    assert sorted(p.suffix for p in images.iterdir()) == [".json", ".lock", ".sif"]


def test_cache_info_and_clean_agree_with_apptainers_own_cache(tmp_path: Path) -> None:
    """What Apptainer itself keeps in the cache ctrain gives it (APPTAINER_CACHEDIR, as for
    `ctrain build`): its blobs, converted SIFs and ORAS files, counted by `ctrain cache info`
    and removed by `ctrain cache clean` by age, after which `apptainer cache list` agrees and a
    pull of what was removed still works."""
    cache = tmp_path / "cache"
    ref = f"docker://{registry_image('cache-busybox')}"
    env = clean_env(CTRAIN_CACHE_DIR=str(cache), APPTAINER_CACHEDIR=str(cache))

    def apptainer(*args: str) -> str:
        done = subprocess.run(
            ["apptainer", *args], env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    def listed() -> tuple[int, int]:
        """(container files, oci blob files) in `apptainer cache list`."""
        words = apptainer("cache", "list").split("There are ")[-1].split()
        return int(words[0]), int(words[words.index("and") + 1])

    apptainer("pull", "--no-https", str(tmp_path / "one.sif"), ref)
    files, blobs = listed()
    assert files == 1 and blobs >= 3  # the converted SIF; manifest, config and layer
    info = ctrain("cache", "info", "--json", cwd=tmp_path, env=env)
    assert info.returncode == 0, info.stderr
    (entry,) = json.loads(info.stdout)["entries"]
    assert entry["name"] == "cache" and entry["size"] > 0
    converted = next((cache / "cache" / "oci-tmp").iterdir())
    old = time.time() - 7200
    os.utime(converted, (old, old))
    cleaned = ctrain("cache", "clean", "--older-than", "1h", cwd=tmp_path, env=env)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"cache/oci-tmp/{converted.name}" in cleaned.stdout
    assert listed() == (0, blobs)  # the SIF went; the newer blobs stayed
    apptainer("pull", "--no-https", str(tmp_path / "two.sif"), ref)  # rebuilt from the blobs
    assert listed() == (1, blobs)
    everything = ctrain("cache", "clean", "--older-than", "0s", cwd=tmp_path, env=env)
    assert everything.returncode == 0, everything.stderr
    assert listed() == (0, 0)
    apptainer("pull", "--no-https", str(tmp_path / "three.sif"), ref)  # Apptainer starts again
    assert listed() == (1, blobs)


# ---- exec, run -----------------------------------------------------------------------------


def test_the_environment_arrives_byte_for_byte_and_nothing_else(
    min_sif: Path, tmp_path: Path
) -> None:
    options, env = passthrough.case(tmp_path)
    env["LANG"] = "xx_XX.host"  # --cleanenv: the host's stays out, the image's own is kept
    done = exec_(
        *options, str(min_sif), "--", "python3", "-c", passthrough.SCRIPT, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    passthrough.check(done.stdout)
    inside = json.loads(done.stdout)
    assert inside["LANG"] == "C.UTF-8"  # the image's OCI Env (ctrain-min.Dockerfile)
    assert inside["LD_LIBRARY_PATH"] == "/.singularity.d/libs"  # Apptainer's own (99-base.sh)
    tricky = exec_(
        "--env", f"TRICKY={TRICKY}", str(min_sif), "--", "python3", "-c", SHOW_TRICKY, cwd=tmp_path
    )
    assert tricky.returncode == 0, tricky.stderr
    assert tricky.stdout == TRICKY


def test_binds_with_a_space_read_only_and_missing(busybox: Path, tmp_path: Path) -> None:
    data = tmp_path / "my data"
    data.mkdir()
    (data / "in").write_text("given\n")
    ro = exec_(
        "-B",
        f"{data}:/data:ro",
        str(busybox),
        "--",
        "sh",
        "-c",
        "cat /data/in; touch /data/x",
        cwd=tmp_path,
    )
    assert ro.stdout == "given\n"
    assert ro.returncode != 0 and "Read-only file system" in ro.stderr
    assert not (data / "x").exists()
    rw = exec_(
        "-B", f"{data}:/data", str(busybox), "--", "sh", "-c", "echo made > /data/out", cwd=tmp_path
    )
    assert rw.returncode == 0, rw.stderr
    assert (data / "out").read_text() == "made\n"
    missing = exec_("-B", f"{tmp_path}/nowhere:/data", str(busybox), "--", "true", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.startswith(
        f"ctrain: error: bind source '{tmp_path}/nowhere' does not exist"
    )


def test_working_directory_exit_code_and_sigterm(busybox: Path, tmp_path: Path) -> None:
    here = tmp_path / "work dir"
    here.mkdir()
    done = exec_(str(busybox), "--", "sh", "-c", "pwd; exit 7", cwd=here)
    assert (done.returncode, done.stdout) == (7, f"{here}\n"), done.stderr
    missing = tmp_path / "nowhere"  # asked for (--cwd), a failed chdir is Apptainer's fatal error
    asked = exec_("--cwd", str(missing), str(busybox), "--", "sh", "-c", "pwd", cwd=here)
    assert asked.returncode == 255 and str(missing) in asked.stderr, asked.stderr
    script = 'trap "echo got-term; exit 42" TERM; echo ready; while :; do sleep 0.2; done'
    proc = subprocess.Popen(
        [
            CTRAIN,
            "exec",
            "--runtime",
            "apptainer",
            "--no-launch",
            str(busybox),
            "--",
            "sh",
            "-c",
            script,
        ],
        env=clean_env(),
        cwd=here,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)  # ctrain exec'd apptainer: the same pid
    out, _ = proc.communicate(timeout=60)
    assert (out, proc.returncode) == ("got-term\n", 42)
    # A command killed by a signal: apptainer (ctrain's process, exec'd) re-raises it on itself,
    # so the caller sees the same death (a shell would say 143).
    killed = exec_(str(busybox), "--", "sh", "-c", "kill -TERM $$", cwd=here)
    assert killed.returncode == -signal.SIGTERM


def test_run_dispatches_through_the_images_runscript(min_sif: Path, tmp_path: Path) -> None:
    """ctrain-min's ENTRYPOINT is `ctrain launch --`: Apptainer's runscript runs it."""
    done = ctrain(
        "run",
        "--runtime",
        "apptainer",
        str(min_sif),
        "--",
        "sh",
        "-c",
        "echo $CTRAIN_LAUNCH_MODE",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "single"


def test_nv_on_a_machine_without_gpus(busybox: Path, tmp_path: Path) -> None:
    """Apptainer 1.4.5 says nothing when --nv finds no NVIDIA driver library: the command runs
    with /.singularity.d/libs empty. (The /dev/nvidia* here are the device nodes `make services`
    makes for Slurm's GPU accounting, bound with the host's /dev.)"""
    done = exec_(
        "--nv",
        str(busybox),
        "--",
        "sh",
        "-c",
        "ls -A /.singularity.d/libs | wc -l; echo $LD_LIBRARY_PATH",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "/.singularity.d/libs"]
    said = [line for line in done.stderr.lower().splitlines() if "nvidia" in line or "gpu" in line]
    assert said == []


# ---- overlays ------------------------------------------------------------------------------


def test_an_overlay_takes_a_write_then_many_readers_and_locks_as_apptainer_does(
    busybox: Path, tmp_path: Path
) -> None:
    overlay = tmp_path / "o.img"
    made = ctrain("overlay", "create", str(overlay), "--size", "64M", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    wrote = exec_(
        "--overlay",
        str(overlay),
        str(busybox),
        "--",
        "sh",
        "-c",
        "mkdir -p /opt/pkgs; echo v1 > /opt/pkgs/f",
        cwd=tmp_path,
    )
    assert wrote.returncode == 0, wrote.stderr
    hold = "cat /opt/pkgs/f; echo held > {mark}; while [ ! -e {stop} ]; do sleep 0.1; done"
    readers = []
    for i in range(2):
        script = hold.format(mark=tmp_path / f"r{i}", stop=tmp_path / "stop")
        argv = [*EXEC, "--overlay", f"{overlay}:ro", str(busybox), "--", "sh", "-c", script]
        readers.append(
            subprocess.Popen(
                argv,
                env=clean_env(),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        wait_for(lambda: all((tmp_path / f"r{i}").exists() for i in range(2)), "2 readers", 60)
        # A writer while the readers run: ctrain refuses before launch, and so does Apptainer
        # itself on ctrain's readers' lock.
        ours = exec_("--overlay", str(overlay), str(busybox), "--", "true", cwd=tmp_path)
        assert ours.returncode != 0
        assert "in use read-only by another process" in ours.stderr
        theirs = subprocess.run(
            ["apptainer", "exec", "--overlay", str(overlay), str(busybox), "true"],
            capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert theirs.returncode == 255, theirs.stderr
    finally:
        (tmp_path / "stop").touch()
        outs = [p.communicate(timeout=60) for p in readers]
    assert [p.returncode for p in readers] == [0, 0], outs
    assert [out for out, _ in outs] == ["v1\n", "v1\n"]


def holding(overlay: str, busybox: Path, tmp_path: Path, via_ctrain: bool) -> subprocess.Popen[str]:
    """A container on ``overlay`` (``:ro`` or not), started by ctrain or by apptainer itself,
    running until its stdin closes; returned once it runs."""
    program = [*EXEC, "--overlay", overlay, str(busybox), "--"] if via_ctrain else [
        "apptainer", "exec", "--overlay", overlay, str(busybox)
    ]  # fmt: skip
    running = subprocess.Popen(
        [*program, "sh", "-c", "echo running; read -r _"],
        env=clean_env(),
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert running.stdout is not None and running.stdout.readline() == "running\n"
    return running


@pytest.mark.parametrize(
    ("held", "by_ctrain", "asked", "refusal"),
    [
        ("", True, ":ro", "is in use read-write by"),
        (":ro", False, "", "is in use read-only by"),
        (":ro", True, ":ro", None),
    ],
    ids=["a reader while ctrain runs a writer", "a writer while apptainer has a reader", "readers"],
)
def test_an_overlay_in_use_is_refused_before_launch_as_apptainer_would(
    held: str, by_ctrain: bool, asked: str, refusal: str | None, busybox: Path, tmp_path: Path
) -> None:
    """ctrain reads the overlay's lock before it execs Apptainer: what Apptainer would refuse
    (exit 255 and its locking message) is refused first, in one line with the fix (exit 4);
    readers share."""
    overlay = tmp_path / "o.img"
    made = ctrain("overlay", "create", str(overlay), "--size", "64M", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    holder = holding(f"{overlay}{held}", busybox, tmp_path, by_ctrain)
    try:
        done = exec_(
            "--overlay", f"{overlay}{asked}", str(busybox), "--", "sh", "-c", ":", cwd=tmp_path
        )
    finally:
        holder.communicate("\n", timeout=TIMEOUT)
    assert holder.returncode == 0
    if refusal is None:
        assert done.returncode == 0, done.stderr
        return
    line = done.stderr.strip()
    assert done.returncode == 4 and "\n" not in line, done.stderr
    assert line.startswith(f"ctrain: error: overlay {overlay} {refusal} ") and " Fix: " in line


# ---- as the unprivileged user ----------------------------------------------------------------


def as_user(user: pwd.struct_passwd, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``ctrain exec --runtime apptainer ARGS`` as the test user, from a copy of the source tree
    (``user_source``) on Debian's Python (the venv and the checkout may lie under /root)."""
    env = clean_env(
        HOME=user.pw_dir,
        PYTHONPATH=str(user_source()),
        USER=TEST_USER,
        LOGNAME=TEST_USER,
        PATH=f"/usr/local/bin:{SYSTEM_PATH}",
    )
    argv = [RUNUSER, "-u", TEST_USER, "--", "/usr/bin/python3", "-m", "ctrain", *EXEC[1:], *args]
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture
def user_dir(test_user: pwd.struct_passwd, root: Path) -> Iterator[Path]:
    path = root / f"user-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir()
    shutil.chown(path, test_user.pw_uid, test_user.pw_gid)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_user_without_dev_fuse_runs_the_sif_extracted(
    min_sif: Path, test_user: pwd.struct_passwd, user_dir: Path
) -> None:
    """/dev/fuse is closed to users here (mode 600): squashfuse cannot mount the SIF, and
    ctrain asks Apptainer to extract it instead (--unsquash)."""
    assert os.stat("/dev/fuse").st_mode & 0o006 == 0  # this machine's setting, left as it is
    plain = subprocess.run(
        [RUNUSER, "-u", TEST_USER, "--", "apptainer", "exec", str(min_sif), "true"],
        env=clean_env(HOME=test_user.pw_dir), cwd=user_dir, capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip
    assert plain.returncode == 255
    assert "/dev/fuse" in plain.stderr
    done = as_user(
        test_user, user_dir, str(min_sif), "--", "sh", "-c", "id -u; pwd; echo made > out"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{test_user.pw_uid}\n{user_dir}\n"
    made = (user_dir / "out").stat()
    assert (made.st_uid, made.st_gid) == (test_user.pw_uid, test_user.pw_gid)
    tricky = as_user(
        test_user,
        user_dir,
        "--env",
        f"TRICKY={TRICKY}",
        str(min_sif),
        "--",
        "python3",
        "-c",
        SHOW_TRICKY,
    )
    assert tricky.returncode == 0, tricky.stderr
    assert tricky.stdout == TRICKY


def test_a_user_without_dev_fuse_is_refused_an_overlay_before_launch(
    busybox: Path, test_user: pwd.struct_passwd, user_dir: Path
) -> None:
    overlay = user_dir / "o.img"
    made = ctrain("overlay", "create", str(overlay), "--size", "64M", cwd=user_dir)
    assert made.returncode == 0, made.stderr
    shutil.chown(overlay, test_user.pw_uid, test_user.pw_gid)
    done = as_user(test_user, user_dir, "--overlay", f"{overlay}:ro", str(busybox), "--", "true")
    assert done.returncode == 2
    assert done.stderr.startswith(f"ctrain: error: overlay {overlay} cannot be mounted")


def tiny_wheel(directory: Path) -> Path:
    """A pure-Python wheel, ``ctrain_extra`` 1.0 (one module saying VALUE = "extra-1.0"),
    written by hand: a zip with the module, METADATA, WHEEL and RECORD."""
    name, info = "ctrain_extra", "ctrain_extra-1.0.dist-info"
    files = {
        f"{name}.py": 'VALUE = "extra-1.0"\n',
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: ctrain-extra\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{info}/RECORD,,\n"
    wheel = directory / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(path, text)
    return wheel


@pytest.mark.slurm
def test_extra_packages_in_an_overlay_then_read_only_by_every_rank(
    min_sif: Path, root: Path, tmp_path: Path
) -> None:
    """A package the image lacks, installed once from a local wheelhouse into an overlay (a
    writer), then imported by 2 ranks under srun with the overlay `:ro`; the image unchanged."""
    wheels = tmp_path / "wheelhouse"
    wheels.mkdir()
    tiny_wheel(wheels)
    overlay = root / f"extra-{os.getpid()}.img"  # where the ranks' step can read it
    made = ctrain("overlay", "create", str(overlay), "--size", "64M", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    pip = ["python3", "-m", "pip", "install", "--no-index", "--find-links", "/wheels"]
    pip += ["--break-system-packages", "--no-warn-script-location", "ctrain-extra"]
    installed = exec_(
        "--overlay", str(overlay), "-B", f"{wheels}:/wheels:ro", str(min_sif), "--", *pip,
        cwd=tmp_path,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Successfully installed ctrain-extra-1.0" in installed.stdout, installed.stdout
    show = "import os, ctrain_extra; print(os.environ['SLURM_PROCID'], ctrain_extra.VALUE)"
    ranks = run(
        ["srun", "-n", "2", "-t", "5", *EXEC, "--overlay", f"{overlay}:ro", str(min_sif),
         "--", "python3", "-c", show],
        clean_env(),
        timeout=TIMEOUT,
    )  # fmt: skip
    assert sorted(ranks.stdout.splitlines()) == ["0 extra-1.0", "1 extra-1.0"], ranks.stderr
    bare = exec_(str(min_sif), "--", "python3", "-c", "import ctrain_extra", cwd=tmp_path)
    assert bare.returncode == 1 and "No module named 'ctrain_extra'" in bare.stderr
    writers = subprocess.run(
        ["srun", "-n", "2", "-t", "5", *EXEC, "--overlay", str(overlay), str(min_sif),
         "--", "true"],
        env=clean_env(), capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip
    assert writers.returncode != 0 and f"--overlay {overlay}:ro" in writers.stderr, writers.stderr
    overlay.unlink()


# ---- under srun: this host and the compute hosts -------------------------------------------


def launch_plans(out: Path, srun: list[str], image: Path, tasks: int) -> list[dict[str, object]]:
    run(
        [*srun, "-n", str(tasks), "-t", "5", "--output", f"{out}/plan-%t.json", *EXEC,
         str(image), "--", "ctrain", "launch", "--explain", "--json"],
        clean_env(),
        timeout=TIMEOUT,
        cwd=out,
    )  # fmt: skip
    return [json.loads((out / f"plan-{t}.json").read_text()) for t in range(tasks)]


@pytest.mark.slurm
def test_launch_inside_the_container_under_srun(min_sif: Path, tmp_path: Path) -> None:
    plans = launch_plans(tmp_path, ["srun"], min_sif, 2)
    assert [p["rank"] for p in plans] == [0, 1]
    assert {p["mode"] for p in plans} == {"multiworker"}
    assert plans[0]["tf_config"]["cluster"] == plans[1]["tf_config"]["cluster"]  # type: ignore[index]


@pytest.mark.cluster
def test_launch_inside_the_container_across_the_compute_hosts(min_sif: Path, root: Path) -> None:
    out = root / f"plans-{os.getpid()}"
    out.mkdir()
    plans = launch_plans(out, ["srun", "-p", CLUSTER_PARTITION, "-N", "2"], min_sif, 2)
    workers = plans[0]["tf_config"]["cluster"]["worker"]  # type: ignore[index]
    assert [w.rsplit(":", 1)[0] for w in workers] == ["cn01", "cn02"], plans
    assert [p["rank"] for p in plans] == [0, 1]
