"""The pure parts of images/pull.py, sif.py and engine_image.py: references, names, argv, the SIF
header, sidecars, the reuse decision, docker's inspect output, and the pull lock between two
processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ctrain import references
from ctrain.errors import ConfigError
from ctrain.images import engine_image, pull
from ctrain.images.record import (
    Sidecar,
    TargetState,
    archive_stamp,
    decide_reuse,
    lock_of,
    read_sidecar,
    sidecar_of,
)
from ctrain.images.stores import sif as sif_store
from ctrain.images.stores.base import PullAsk
from ctrain.util import fs, locks

WEIRD = ["plain", "with space", "quote'and\"double", "new\nline", "colon:comma,", "ünï"]
DIGEST = "sha256:" + "ab" * 32


# -- references ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "runtime", "expected"),
    [
        ("docker://ghcr.io/a/b:1", "apptainer", "docker://ghcr.io/a/b:1"),
        ("  oras://r/x:1 ", "singularity", "oras://r/x:1"),
        ("library://u/c/i:latest", "apptainer", "library://u/c/i:latest"),
        ("https://example.org/i.sif", "apptainer", "https://example.org/i.sif"),
        ("docker://ghcr.io/a/b:1", "docker", "ghcr.io/a/b:1"),
        ("127.0.0.1:5000/t/busybox:1", "docker", "127.0.0.1:5000/t/busybox:1"),
        (f"busybox@{DIGEST}", "podman", f"busybox@{DIGEST}"),
    ],
)
def test_check_ref_accepts(ref: str, runtime: str, expected: str) -> None:
    assert references.check_ref(ref, runtime) == expected


@pytest.mark.parametrize(
    ("ref", "runtime", "words"),
    [
        ("", "apptainer", "no image reference"),
        ("   ", "docker", "no image reference"),
        ("ghcr.io/a/b:1", "apptainer", "write docker://ghcr.io/a/b:1"),
        ("ftp://x/y", "apptainer", "cannot pull"),
        ("docker://", "apptainer", "cannot pull"),
        ("oras://r/x:1", "docker", "--runtime apptainer"),
        ("docker://a b", "apptainer", "spaces"),
        ("docker://a\nb", "apptainer", "spaces"),
        ("-rm", "docker", "REPO[:TAG]"),
        ("a b", "docker", "spaces"),
    ],
)
def test_check_ref_refuses_with_the_fix(ref: str, runtime: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        references.check_ref(ref, runtime)
    assert words in info.value.line()
    assert "\n" not in info.value.line().replace(repr(ref), "")


@pytest.mark.parametrize(
    ("ref", "name"),
    [
        ("docker://ghcr.io/ctrain/ctrain:0.1.0-gpu", "docker_ghcr.io_ctrain_ctrain_0.1.0-gpu.sif"),
        ("oras://ghcr.io/ctrain/ctrain:0.1.0-gpu", "oras_ghcr.io_ctrain_ctrain_0.1.0-gpu.sif"),
        (f"docker://busybox@{DIGEST}", f"docker_busybox_{DIGEST.replace(':', '_')}.sif"),
        ("https://h/x.sif?a=1&b=2", "https_h_x.sif_a_1_b_2.sif"),
    ],
)
def test_image_filename(ref: str, name: str) -> None:
    assert references.image_filename(ref) == name


def test_long_names_are_shortened_and_stay_distinct() -> None:
    a = references.image_filename("docker://r/" + "x" * 300 + ":1")
    b = references.image_filename("docker://r/" + "x" * 300 + ":2")
    assert a != b and len(a) < 130 and a.endswith(".sif")


def test_digest_in_ref() -> None:
    assert engine_image.digest_in_ref(f"docker://r/x@{DIGEST}") == DIGEST
    assert engine_image.digest_in_ref("docker://r/x:1") is None


def test_companion_paths() -> None:
    target = Path("/c/images/x.sif")
    assert sidecar_of(target) == Path("/c/images/x.sif.json")
    assert lock_of(target) == Path("/c/images/x.sif.lock")


# -- argv golden tests --------------------------------------------------------------------------


@pytest.mark.parametrize("name", WEIRD)
def test_sif_argv_round_trips_any_path(name: str) -> None:
    temp = Path("/d") / name / ".x.sif.pull-1"
    assert sif_store.sif_pull_argv("apptainer", temp, "docker://a/b:1", False) == [
        "apptainer", "pull", "--disable-cache", str(temp), "docker://a/b:1",
    ]  # fmt: skip
    assert sif_store.sif_pull_argv("/opt/singularity", temp, "oras://a/b:1", True) == [
        "/opt/singularity", "pull", "--disable-cache", "--force", str(temp), "oras://a/b:1",
    ]  # fmt: skip
    assert sif_store.sif_inspect_argv("apptainer", temp) == ["apptainer", "inspect", str(temp)]


def test_a_loopback_registry_is_pulled_over_plain_http() -> None:
    temp = Path("/d/.x.sif.pull-1")
    ref = "docker://127.0.0.1:5000/a/b:1"
    assert sif_store.sif_pull_argv("apptainer", temp, ref, False) == [
        "apptainer", "pull", "--disable-cache", "--no-https", str(temp), ref,
    ]  # fmt: skip


def test_engine_argv() -> None:
    assert engine_image.engine_pull_argv("podman", "r/x:1") == ["podman", "pull", "r/x:1"]
    assert engine_image.engine_inspect_argv("podman", "r/x:1") == [
        "podman",
        "image",
        "inspect",
        "r/x:1",
    ]


# -- sidecars -----------------------------------------------------------------------------------


def _sidecar(**changes: object) -> Sidecar:
    base = dict(
        ref="docker://a/b:1",
        runtime="apptainer",
        pulled_at="2026-01-02T03:04:05Z",
        ctrain_version="0.1.0",
        size=5096,
    )
    base.update(changes)
    return Sidecar(**base)  # type: ignore[arg-type]


def test_sidecar_round_trip(tmp_path: Path) -> None:
    sidecar = _sidecar(digest=DIGEST, target="/x y/z.sif")
    path = tmp_path / "x.sif.json"
    fs.write_text(path, sidecar.to_json())
    assert read_sidecar(path) == sidecar
    assert json.loads(path.read_text())["ref"] == "docker://a/b:1"
    assert [p.name for p in tmp_path.iterdir()] == ["x.sif.json"]  # no temporary left


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        '{"ref": "x"}',
        '{"ref": 1, "runtime": "a", "pulled_at": "t", "ctrain_version": "v"}',
        '{"ref": "x", "runtime": "a", "pulled_at": "t", "ctrain_version": "v", "size": "9"}',
        '{"ref": "x", "runtime": "a", "pulled_at": "t", "ctrain_version": "v", "size": true}',
        '{"ref": "x", "runtime": "a", "pulled_at": "t", "ctrain_version": "v", "digest": 3}',
    ],
)
def test_malformed_sidecars_read_as_none(text: str) -> None:
    assert Sidecar.parse(text) is None


def test_unknown_sidecar_keys_are_ignored() -> None:
    text = '{"ref": "x", "runtime": "a", "pulled_at": "t", "ctrain_version": "v", "new": 1}'
    assert Sidecar.parse(text) == Sidecar("x", "a", "t", "v")


# -- the reuse decision -------------------------------------------------------------------------

REF = "docker://a/b:1"
WHOLE = TargetState(True, 5096, None)


@pytest.mark.parametrize(
    ("sidecar", "state", "owned", "force", "action", "words"),
    [
        (None, TargetState(False), False, False, "pull", "not present"),
        (_sidecar(), TargetState(False), True, False, "pull", "not present"),
        (_sidecar(), WHOLE, True, False, "reuse", "up to date"),
        (_sidecar(), WHOLE, False, False, "reuse", "up to date"),
        (_sidecar(), WHOLE, False, True, "pull", "--force"),
        (_sidecar(size=None), WHOLE, False, False, "reuse", "up to date"),
        (_sidecar(), TargetState(True, 5096, "truncated"), False, False, "pull", "damaged"),
        (_sidecar(), TargetState(True, 7000, None), False, False, "pull", "changed since"),
        (_sidecar(ref="docker://a/b:0"), WHOLE, True, False, "pull", "holds docker://a/b:0"),
        (_sidecar(ref="docker://a/b:0"), WHOLE, False, False, "refuse", "not docker://a/b:1"),
        (_sidecar(ref="docker://a/b:0"), WHOLE, False, True, "pull", "--force"),
        (None, WHOLE, False, False, "refuse", "not pulled by ctrain"),
        (None, WHOLE, False, True, "pull", "--force"),
        (None, WHOLE, True, False, "pull", "no sidecar"),
    ],
)
def test_decide_reuse(  # noqa: PLR0913
    sidecar: Sidecar | None,
    state: TargetState,
    owned: bool,
    force: bool,
    action: str,
    words: str,
) -> None:
    got, reason = decide_reuse(sidecar, REF, state, owned, force)
    assert (got, words in reason) == (action, True), reason


# -- docker/podman output -----------------------------------------------------------------------

INSPECT = json.dumps(
    [
        {
            "Id": "sha256:1111",
            "RepoTags": ["127.0.0.1:5000/t/bb:1"],
            "RepoDigests": [f"127.0.0.1:5000/t/bb@{DIGEST}"],
        }
    ]
)


def test_parse_engine_inspect() -> None:
    image = engine_image.parse_engine_inspect(INSPECT)
    assert image == engine_image.EngineImage("sha256:1111", (f"127.0.0.1:5000/t/bb@{DIGEST}",))
    with pytest.raises(ValueError):
        engine_image.parse_engine_inspect("[]")


@pytest.mark.parametrize(
    ("ref", "repo"),
    [
        ("127.0.0.1:5000/t/bb:1", "127.0.0.1:5000/t/bb"),
        ("127.0.0.1:5000/t/bb", "127.0.0.1:5000/t/bb"),
        (f"bb@{DIGEST}", "bb"),
        (f"r:5000/bb:1@{DIGEST}", "r:5000/bb"),
    ],
)
def test_repository_of(ref: str, repo: str) -> None:
    assert engine_image.repository_of(ref) == repo


def test_pick_digest() -> None:
    other = "sha256:" + "cd" * 32
    digests = [f"other/x@{other}", f"127.0.0.1:5000/t/bb@{DIGEST}"]
    assert engine_image.pick_digest("127.0.0.1:5000/t/bb:1", digests) == DIGEST
    assert engine_image.pick_digest("busybox:1", [f"busybox@{DIGEST}"]) == DIGEST
    assert engine_image.pick_digest("library/busybox:1", [f"busybox@{DIGEST}"]) == DIGEST
    assert engine_image.pick_digest("x:1", []) is None
    assert engine_image.pick_digest(f"x@{DIGEST}", []) == DIGEST


def test_engine_pull_status() -> None:
    fresh = "1: Pulling from t/bb\nDigest: sha256:ab\nStatus: Downloaded newer image for t/bb:1\n"
    same = "1: Pulling from t/bb\nDigest: sha256:ab\nStatus: Image is up to date for t/bb:1\n"
    assert engine_image.engine_pull_status(fresh) == "downloaded"
    assert engine_image.engine_pull_status(same) == "up to date"
    assert engine_image.engine_pull_status("Trying to pull t/bb:1...\n") == "unknown"


def test_pull_outcome_without_a_status_line_compares_the_image_ids() -> None:
    """podman prints no Status: line; a --force pull of an unchanged image is up to date."""
    old = engine_image.EngineImage(id="sha256:" + "1" * 64, repo_digests=())
    new = engine_image.EngineImage(id="sha256:" + "2" * 64, repo_digests=())
    quiet = "Trying to pull t/bb:1...\nWriting manifest to image destination\n"
    assert engine_image.pull_outcome(old, old, quiet) == "up to date"
    assert engine_image.pull_outcome(old, new, quiet) == "downloaded"
    assert engine_image.pull_outcome(None, new, quiet) == "downloaded"
    assert engine_image.pull_outcome(old, old, "Status: Downloaded newer image for t/bb:1\n") == (
        "downloaded"
    )
    assert engine_image.pull_outcome(None, new, "Status: Image is up to date for t/bb:1\n") == (
        "up to date"
    )


# -- plans --------------------------------------------------------------------------------------


def test_plan_default_target_is_in_the_cache(tmp_path: Path) -> None:
    plan = pull.plan(
        PullAsk(ref="docker://a/b:1", runtime="apptainer", program="apptainer", cache_root=tmp_path)
    )
    assert plan.target == tmp_path / "images" / "docker_a_b_1.sif"
    assert plan.record == tmp_path / "images" / "docker_a_b_1.sif.json"
    assert plan.owned


def test_plan_output_directory_and_file(tmp_path: Path) -> None:
    into_dir = pull.plan(
        PullAsk(
            ref="docker://a/b:1",
            runtime="apptainer",
            program="a",
            output=str(tmp_path),
            cache_root=tmp_path,
        )
    )
    assert into_dir.target == tmp_path / "docker_a_b_1.sif" and not into_dir.owned
    named = pull.plan(
        PullAsk(
            ref="docker://a/b:1",
            runtime="apptainer",
            program="a",
            output=str(tmp_path / "my image.sif"),
            cache_root=tmp_path,
        )
    )
    assert named.target == tmp_path / "my image.sif"


@pytest.mark.parametrize(
    ("runtime", "output", "words"),
    [
        ("docker", "x.sif", "-o/--output has no meaning for docker"),
        ("host", None, "has no images to pull"),
        ("apptainer", "missing/dir/x.sif", "does not exist"),
        ("apptainer", "missing/", "does not exist"),
        ("apptainer", "", "not a usable path"),
    ],
)
def test_plan_refusals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runtime: str, output: str | None, words: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        pull.plan(
            PullAsk(
                ref="docker://a/b:1",
                runtime=runtime,
                program=runtime,
                output=output,
                cache_root=tmp_path,
            )
        )
    assert words in info.value.message
    assert list(tmp_path.iterdir()) == []


def test_plan_docker_record_in_the_cache(tmp_path: Path) -> None:
    plan = pull.plan(
        PullAsk(
            ref="docker://r:5000/t/bb:1", runtime="docker", program="docker", cache_root=tmp_path
        )
    )
    assert plan.ref == "r:5000/t/bb:1" and plan.target is None
    assert plan.record == tmp_path / "docker" / "r_5000_t_bb_1.json"
    assert plan.lock == tmp_path / "docker" / "r_5000_t_bb_1.lock"


@pytest.mark.parametrize("scheme", ["docker-archive", "oci-archive"])
@pytest.mark.parametrize("written", ["{scheme}:{name}", "{scheme}://{name}"])
def test_plan_an_archive_by_its_absolute_path_and_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scheme: str, written: str
) -> None:
    monkeypatch.chdir(tmp_path)
    archive = tmp_path / "my image.tar"
    archive.write_bytes(b"x" * 10)
    ref = written.format(scheme=scheme, name=archive.name)
    plan = pull.plan(
        PullAsk(ref=ref, runtime="apptainer", program="apptainer", cache_root=tmp_path)
    )
    assert plan.ref == f"{scheme}:{archive}"  # the form apptainer pull takes
    assert plan.target == tmp_path / "images" / references.image_filename(f"{scheme}:{archive}")
    info = archive.stat()
    assert plan.stamp == archive_stamp(10, info.st_mtime_ns, info.st_ino)
    other = pull.plan(
        PullAsk(ref="docker://a/b:1", runtime="apptainer", program="a", cache_root=tmp_path)
    )
    assert other.stamp is None


def test_plan_an_archive_that_is_not_here_without_a_stamp(tmp_path: Path) -> None:
    """A compute node may not see the archive: the plan trusts a pull's record, as offline."""
    ref = f"docker-archive:{tmp_path / 'gone.tar'}"
    plan = pull.plan(
        PullAsk(ref=ref, runtime="apptainer", program="apptainer", cache_root=tmp_path)
    )
    assert (plan.ref, plan.stamp) == (ref, None)
    assert references.archive_path(ref) == tmp_path / "gone.tar"
    assert references.archive_path("docker://a/b:1") is None


@pytest.mark.parametrize(
    ("name", "said", "fix"),
    [
        ("", "is not a file", "archive file"),
        ("a:b.tar", "image inside the archive", "without ':'"),
    ],
)
def test_plan_refuses_an_archive_that_is_not_a_file(
    tmp_path: Path, name: str, said: str, fix: str
) -> None:
    ref = f"docker-archive:{tmp_path / name}"
    with pytest.raises(ConfigError) as info:
        pull.plan(PullAsk(ref=ref, runtime="apptainer", program="apptainer", cache_root=tmp_path))
    assert said in info.value.message and fix in info.value.fix
    assert list(tmp_path.iterdir()) == []


# -- the lock between two processes -------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from ctrain.util import locks
    with locks.hold_lock(Path(sys.argv[1]), "the other pull, pid 1 on n1", print):
        print("held", flush=True)
        sys.stdin.read()
    """
)


def test_hold_lock_waits_for_the_other_process_and_names_it(tmp_path: Path) -> None:
    lock = tmp_path / "x.sif.lock"
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        waited: list[str] = []

        def on_wait(who: str) -> None:
            waited.append(who)
            assert other.stdin is not None
            other.stdin.close()  # now let it go

        with locks.hold_lock(lock, "me", on_wait):
            assert other.wait(timeout=30) == 0
            assert lock.read_text().strip() == "me"
        assert waited == ["the other pull, pid 1 on n1"]
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


def test_hold_lock_without_contention_does_not_wait(tmp_path: Path) -> None:
    waited: list[str] = []
    with locks.hold_lock(tmp_path / "l.lock", "me", waited.append):
        pass
    with locks.hold_lock(tmp_path / "l.lock", "me again", waited.append):
        pass
    assert waited == []


def test_describe_holder() -> None:
    text = locks.describe_holder("ctrain pull", {"SLURM_JOB_ID": "42"})
    assert text.startswith("ctrain pull, pid ") and text.endswith(", Slurm job 42")
    assert "Slurm" not in locks.describe_holder("ctrain pull", {})
