"""The Apptainer stand-in's images, pulls, builds and overlays against
/work/shared/apptainer-facts.md (each test cites its section and row); exec and the
environment: test_fake_apptainer.py."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fake_apptainer
from tests.support.helpers import Sandbox, sandbox, wait_for
from tests.support.standin import sif

LOCAL = "docker://127.0.0.1:5000/ctrain-standin/env:1"
MODELLED = "docker://registry.example/team/train:1"


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    made = sandbox(tmp_path, FAKE_APPTAINER_LOG=str(tmp_path / "calls.jsonl"))
    for name in ("apptainer", "singularity"):
        fake_apptainer.install(made.bin, name)
    fake_apptainer.make_sif(tmp_path / "img.sif", {"PATH": "/usr/bin:/bin"}, {"team": "ml"})
    return made


apptainer = fake_apptainer.run


def start(box: Sandbox, *args: str, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(box.bin / "apptainer"), *args],
        env=box.with_env(**extra),
        cwd=box.root,
        stderr=subprocess.PIPE,
        text=True,
    )


def downloads(box: Sandbox) -> list[dict[str, object]]:
    return fake_apptainer.downloads(box.root / "calls.jsonl")


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny image in the local registry: no files, an Env and a CMD."""
    empty = tmp_path_factory.mktemp("image") / "empty.tar"
    subprocess.run(["tar", "cf", str(empty), "--files-from", "/dev/null"], check=True)
    name = LOCAL.removeprefix("docker://")
    changes = ["ENV PATH=/opt/tool/bin:/usr/bin:/bin", 'ENV GREETING="hello world"',
               'CMD ["echo", "from-cmd"]']  # fmt: skip
    flags = [arg for change in changes for arg in ("--change", change)]
    for argv in (["docker", "import", *flags, str(empty), name], ["docker", "push", "-q", name]):
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return LOCAL


@pytest.mark.docker
def test_a_local_registry_image_is_fetched_for_real(box: Sandbox, pushed: str) -> None:
    """exec: "remote IMAGE ... converted or cached into $APPTAINER_CACHEDIR/cache on every run.
    For docker:// the manifest digest is fetched from the registry before the cache is checked,
    so this needs network"; the image's environment is its OCI config's Env. The registry
    serves plain HTTP: reached with --no-https only, as the real binary does."""
    https = apptainer(box, "exec", pushed, "true")
    assert https.returncode == 255 and "server gave HTTP response to HTTPS client" in https.stderr
    done = apptainer(box, "exec", "--no-https", pushed, "sh", "-c", 'echo "$GREETING|$PATH"')
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello world|/opt/tool/bin:/usr/bin:/bin\n"
    assert apptainer(box, "run", "--no-https", pushed).stdout == "from-cmd\n"  # CMD, no args
    assert [d["ref"] for d in downloads(box)] == [pushed]  # the second run used the cache
    (entry,) = (box.home / ".apptainer" / "cache" / "cache" / "oci-tmp").iterdir()
    manifest = subprocess.run(
        ["curl", "-sI", "-H", "Accept: application/vnd.docker.distribution.manifest.v2+json",
         "http://127.0.0.1:5000/v2/ctrain-standin/env/manifests/1"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.lower()  # fmt: skip
    assert f"docker-content-digest: sha256:{entry.name}" in manifest
    offline = apptainer(box, "exec", "--no-https", pushed, "true", FAKE_APPTAINER_OFFLINE="1")
    assert offline.returncode == 255 and "failed to get checksum" in offline.stderr


def test_a_modelled_registry_and_the_offline_host(box: Sandbox) -> None:
    """exec: remote IMAGE row (the manifest first, so a warm cache does not help offline);
    "docker-daemon://NAME:TAG is rejected by pull/exec/run ... only build accepts both"."""
    env = json.dumps({"PATH": "/usr/bin:/bin", "FROM": "synthesised"})
    done = apptainer(box, "exec", MODELLED, "sh", "-c", "echo $FROM", FAKE_APPTAINER_IMAGE_ENV=env)
    assert done.stdout == "synthesised\n" and len(downloads(box)) == 1
    assert apptainer(box, "exec", MODELLED, "true").returncode == 0 and len(downloads(box)) == 1
    offline = apptainer(box, "exec", MODELLED, "true", FAKE_APPTAINER_OFFLINE="1")
    assert offline.returncode == 255
    for verb in (["exec"], ["pull"]):
        refused = apptainer(box, *verb, "docker-daemon://x:1", *(["true"] * (verb == ["exec"])))
        assert refused.returncode == 255 and "invalid reference format" in refused.stderr
    assert apptainer(box, "build", "d.sif", "docker-daemon://x:1").returncode == 0


def test_pull_names_refuses_to_overwrite_and_forces(box: Sandbox) -> None:
    """pull: "1 or 2 positional arguments. DEST comes first ... name_tag.sif ... --dir D ...
    If DEST exists and --force (-F) is not given: error "Image file already exists"."""
    assert apptainer(box, "pull", MODELLED).returncode == 0
    assert (box.root / "train_1.sif").read_bytes() == fake_apptainer.pulled_bytes(MODELLED)
    again = apptainer(box, "pull", MODELLED)
    assert again.returncode == 255 and "Image file already exists" in again.stderr
    forced = apptainer(box, "pull", "--force", "--dir", "home", "x.sif", "docker://a/b")
    assert forced.returncode == 0 and fake_apptainer.is_sif(box.home / "x.sif")
    assert apptainer(box, "pull", "docker://a/b").returncode == 0
    assert (box.root / "b_latest.sif").exists()


def test_pull_goes_through_the_cache_unless_disabled(box: Sandbox) -> None:
    """pull: "--disable-cache: the SIF is written straight to DEST. Otherwise the SIF is built
    inside the cache (cache/oci-tmp/<digest> ...) and then copied to DEST through
    DEST_DIR/tmp-copy-* plus a rename ... the image ends up stored twice"."""
    cache = box.root / "c"
    assert apptainer(box, "pull", "a.sif", MODELLED, APPTAINER_CACHEDIR=str(cache)).returncode == 0
    (entry,) = (cache / "cache" / "oci-tmp").iterdir()
    assert entry.read_bytes() == (box.root / "a.sif").read_bytes()
    assert not list(box.root.glob("tmp-copy-*"))
    other = "docker://registry.example/other:2"
    done = apptainer(box, "pull", "--disable-cache", "b.sif", other, APPTAINER_CACHEDIR=str(cache))
    assert done.returncode == 0 and fake_apptainer.is_sif(box.root / "b.sif")
    assert len(list((cache / "cache" / "oci-tmp").iterdir())) == 1
    assert len(downloads(box)) == 2


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_build_temp_goes_on_exit_and_on_sigint_sigterm_but_not_sigkill(
    box: Sandbox, number: int
) -> None:
    """pull: "Layer unpacking and squashfs creation use APPTAINER_TMPDIR (build-temp-*). Those
    temporary files are removed on normal exit and on SIGINT/SIGTERM, but not on SIGKILL"."""
    tmp = box.root / "tmp"
    tmp.mkdir()
    assert apptainer(box, "pull", "one.sif", MODELLED, APPTAINER_TMPDIR=str(tmp)).returncode == 0
    assert list(tmp.iterdir()) == []
    proc = start(box, "pull", "two.sif", "docker://x/slow:1", APPTAINER_TMPDIR=str(tmp),
                 FAKE_APPTAINER_DELAY="30")  # fmt: skip
    try:
        wait_for(lambda: list(tmp.glob("build-temp-*")) != [], "build-temp-* to appear")
        proc.send_signal(number)
        status = proc.wait(timeout=30)
    finally:
        proc.kill()
    if number == signal.SIGKILL:
        assert status == -signal.SIGKILL and list(tmp.glob("build-temp-*"))
    else:
        assert status == 255 and list(tmp.iterdir()) == []


def test_sif_files_are_sif_shaped_and_checked_like_the_sif_loader(box: Sandbox) -> None:
    """SIF global header: "version 01\\0 (anything else is rejected) ... The loader reads
    descriptors-total x 585-byte descriptors ... descriptors size = total x 585"."""
    data = (box.root / "img.sif").read_bytes()
    fields = sif.HEADER.unpack_from(data)
    assert fields[1:3] == (b"SIF_MAGIC\x00", b"01\x00") and fields[10] == fields[8] * 585
    for name, at, value in [("v2.sif", 42, b"02\x00"), ("desc.sif", 104, b"\x01")]:
        (box.root / name).write_bytes(data[:at] + value + data[at + len(value) :])
        refused = apptainer(box, "exec", name, "true")
        assert refused.returncode == 255 and "invalid SIF file" in refused.stderr
        assert apptainer(box, "inspect", name).returncode == 255


def test_inspect_prints_labels_and_json(box: Sandbox) -> None:
    """inspect: "With no flag it prints the labels as key: value lines ... JSON shape:
    {"data":{"attributes":{"labels":..}},"type":"container"}. Empty fields are omitted"."""
    assert apptainer(box, "inspect", "img.sif").stdout == "team: ml\n"
    shown = json.loads(apptainer(box, "inspect", "--json", "img.sif").stdout)
    assert shown == {"data": {"attributes": {"labels": {"team": "ml"}}}, "type": "container"}


def test_build_checks_the_definition_and_its_build_args(box: Sandbox) -> None:
    """Definition files: "Any other key is a hard error ... {{ NAME }} is replaced from
    --build-arg, then from %arguments"; build: "without it [--warn-unused-build-args], unused
    build-args are fatal"; %environment and %labels end up in the image."""
    recipe = box.root / "r.def"
    recipe.write_text(
        "Bootstrap: localimage\nFrom: img.sif\n\n%arguments\n    V=12\n"
        "%environment\n    export FROM_DEF={{ V }}\n%labels\n    version {{ V }}\n"
    )
    assert apptainer(box, "build", "--build-arg", "V=11", "o.sif", "r.def").returncode == 0
    assert apptainer(box, "exec", "o.sif", "sh", "-c", "echo $FROM_DEF").stdout == "11\n"
    assert apptainer(box, "inspect", "o.sif").stdout == "version: 11\n"
    unused = apptainer(box, "build", "--force", "--build-arg", "W=1", "o.sif", "r.def")
    assert unused.returncode == 255 and "W" in unused.stderr
    args = ["--force", "--warn-unused-build-args", "--build-arg", "W=1", "o.sif", "r.def"]
    assert apptainer(box, "build", *args).returncode == 0
    old = apptainer(box, "build", "--force", "o.sif", "r.def", FAKE_APPTAINER_VERSION="1.1.9")
    assert old.returncode == 255 and "%arguments" in old.stderr
    recipe.write_text("Bootstrap: docker\nFrom: debian:{{ X }}\n")
    assert "build var X" in apptainer(box, "build", "--force", "o.sif", "r.def").stderr
    recipe.write_text("Bootstrap: docker\nFrum: debian\n")
    assert apptainer(box, "build", "--force", "o.sif", "r.def").returncode == 255
    nowhere = apptainer(box, "build", "no/such/dir/o.sif", "img.sif")
    assert nowhere.returncode == 255 and nowhere.stderr.startswith("FATAL:")


def test_build_reads_build_args_from_a_file(box: Sandbox) -> None:
    """build: --build-arg-file F (Apptainer's ReadBuildArgs, pkg/build/args: KEY=VALUE lines,
    others skipped with a warning; each --build-arg over the file's; an unreadable file fatal)."""
    (box.root / "r.def").write_text(
        "Bootstrap: localimage\nFrom: img.sif\n%labels\n    a {{ A }}\n    b {{ B }}\n"
    )
    (box.root / "args.env").write_text("A = 1\nnot a pair\nB=2\n")
    built = apptainer(box, "build", "--build-arg-file", "args.env", "o.sif", "r.def")
    assert built.returncode == 0 and 'Skipping "not a pair"' in built.stderr
    assert apptainer(box, "inspect", "o.sif").stdout == "a: 1\nb: 2\n"
    args = ["--build-arg-file", "args.env", "--build-arg", "B=3", "o.sif", "r.def"]
    assert apptainer(box, "build", "--force", *args).returncode == 0
    assert apptainer(box, "inspect", "o.sif").stdout == "a: 1\nb: 3\n"
    gone = apptainer(box, "build", "--force", "--build-arg-file", "none.env", "o.sif", "r.def")
    assert gone.returncode == 255 and "none.env" in gone.stderr
    old = apptainer(box, "build", "--force", *args, FAKE_APPTAINER_VERSION="1.1.9")
    assert old.returncode == 1 and "unknown flag: --build-arg-file" in old.stderr


def ext3(path: Path, field: str) -> str:
    done = subprocess.run(
        ["/usr/sbin/dumpe2fs", "-h", str(path)], capture_output=True, text=True, timeout=30
    )
    return next(line for line in done.stdout.splitlines() if line.startswith(field + ":"))


@pytest.mark.parametrize("sparse", [True, False])
def test_overlay_create_makes_a_real_ext3_image(box: Sandbox, sparse: bool) -> None:
    """overlay create: "-S/--sparse: uses truncate --size=NM; without it, dd ... (writes every
    byte)"; "Runs mkfs.ext3 -d STAGE ...: upper/ and work/ ... default mke2fs options (5% of
    blocks reserved for root)"; "An existing writable PATH ... error"."""
    args = ["overlay", "create", *(["--sparse"] * sparse), "--size", "64", "o.img"]
    assert apptainer(box, *args).returncode == 0
    image = box.root / "o.img"
    assert image.stat().st_size == 64 * 1024**2
    ran = fake_apptainer.calls(box.root / "calls.jsonl")[-1]["ran"]
    assert isinstance(ran, list)
    first, mkfs = ran
    assert Path(first[0]).name == ("truncate" if sparse else "dd")
    assert ("count=64" in first) is not sparse
    assert Path(mkfs[0]).name == "mkfs.ext3" and "-d" in mkfs
    blocks = int(ext3(image, "Block count").split()[-1])
    reserved = int(ext3(image, "Reserved block count").split()[-1])
    assert reserved == blocks * 5 // 100
    assert {"upper", "work"} <= set(listing(image, "/"))
    assert apptainer(box, *args).returncode == 255  # it exists now


def listing(image: Path, directory: str) -> list[str]:
    return subprocess.run(
        ["/usr/sbin/debugfs", "-R", f"ls {directory}", str(image)],
        capture_output=True, text=True, timeout=30,
    ).stdout.split()  # fmt: skip


def test_overlay_create_dirs_fakeroot_and_existing_paths(box: Sandbox) -> None:
    """overlay create: "--create-dir DIR: repeatable; creates upper/DIR. -f/--fakeroot ...
    (Apptainer only; CE has no such flag)"; "An existing writable PATH: if it is a SIF, an ext3
    overlay partition is added to it" (not modelled: refused with "stand-in:")."""
    args = ["overlay", "create", "--sparse", "--create-dir", "data", "o.img"]
    assert apptainer(box, *args).returncode == 0
    assert "data" in listing(box.root / "o.img", "/upper")
    ce = apptainer(box, "overlay", "create", "--fakeroot", "c.img", program="singularity")
    assert ce.returncode == 1 and "unknown flag" in ce.stderr
    assert apptainer(box, "overlay", "create", "--fakeroot", "--sparse", "a.img").returncode == 0
    on_sif = apptainer(box, "overlay", "create", "img.sif")
    assert on_sif.returncode == 255 and "stand-in:" in on_sif.stderr


@pytest.fixture
def overlay(box: Sandbox) -> Iterator[Path]:
    assert apptainer(box, "overlay", "create", "--sparse", "o.img").returncode == 0
    yield box.root / "o.img"


def holding(box: Sandbox, spec: str) -> subprocess.Popen[str]:
    """An exec that holds ``spec``'s lock until ./release exists."""
    marker = box.root / f"held-{spec.replace(':', '-')}"
    script = f"touch {marker}; while [ ! -e release ]; do sleep 0.05; done"
    proc = start(box, "exec", "--overlay", spec, "img.sif", "sh", "-c", script)
    wait_for(marker.exists, f"an exec holding {spec}")
    return proc


@pytest.mark.parametrize(
    ("first", "second", "allowed"),
    [("o.img", "o.img", False), ("o.img", "o.img:ro", False), ("o.img:ro", "o.img", False),
     ("o.img:ro", "o.img:ro", True)],
)  # fmt: skip
def test_overlay_locks_many_readers_or_one_writer(
    box: Sandbox, overlay: Path, first: str, second: str, allowed: bool
) -> None:
    """overlay create, Locking: "a writable overlay takes an fcntl write lock ... :ro takes a
    read lock. A second writer fails, and a reader fails while a writer is active (and the
    other way round)"; the lock is held while the command runs."""
    proc = holding(box, first)
    try:
        done = apptainer(box, "exec", "--overlay", second, "img.sif", "true")
        assert (done.returncode == 0) is allowed, done.stderr
        assert allowed or "currently in use by another process" in done.stderr
    finally:
        (box.root / "release").touch()
        assert proc.wait(timeout=30) == 0
    assert apptainer(box, "exec", "--overlay", second, "img.sif", "true").returncode == 0


def test_overlays_must_be_ext3_one_writable_and_not_with_writable_tmpfs(
    box: Sandbox, overlay: Path
) -> None:
    """exec: --overlay "Accepts an ext3 image file, a directory ... only ro means read-only
    ... At most one writable overlay"; --writable-tmpfs "Cannot be combined with a writable
    overlay"; overlay create: "Accepted ext3 overlay images must have a journal"."""
    (box.root / "empty.img").write_bytes(b"")
    (box.root / "dir").mkdir()
    assert apptainer(box, "exec", "-o", "empty.img:ro", "img.sif", "true").returncode == 255
    ok = apptainer(box, "exec", "-o", "dir", "-o", "o.img:rw", "img.sif", "true")
    assert ok.returncode == 255  # two writable
    ok = apptainer(box, "exec", "-o", "dir:ro", "-o", "o.img:rw", "img.sif", "true")
    assert ok.returncode == 0, ok.stderr
    tmpfs = apptainer(box, "exec", "--writable-tmpfs", "-o", "o.img", "img.sif", "true")
    assert tmpfs.returncode == 255
