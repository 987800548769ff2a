"""``ctrain pull`` end to end against the stand-in apptainer (tests/support/fake_apptainer.py): argv
and environment, reuse, --force, killed and interrupted pulls, concurrent pulls, and bad input."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from ctrain import references
from ctrain.images.record import read_sidecar, sidecar_of
from tests.support import fake_apptainer
from tests.support.helpers import CTRAIN, ctrain_env, run_ctrain, snapshot, start_ctrain, wait_for

REF_A = "docker://registry.example/team/train:1"
REF_B = "docker://registry.example/team/train:2"
TIMEOUT = 60


class Env:
    """The stand-in apptainer first on PATH, a cache under tmp, and helpers to run ctrain."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = tmp / "calls.jsonl"
        self.cache = tmp / "cache"
        self.node_tmp = tmp / "node-tmp"
        self.node_tmp.mkdir()
        self.box = fake_apptainer.with_standin(
            tmp,
            USER="tester",
            CTRAIN_CACHE_DIR=str(self.cache),
            CTRAIN_MIN_FREE_GB="1",
            TMPDIR=str(self.node_tmp),
        )

    def env(self, **extra: str) -> dict[str, str]:
        return self.box.with_env(**extra)

    def run(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return run_ctrain("pull", *args, env=self.env(**extra), cwd=self.tmp, timeout=TIMEOUT)

    def start(self, *args: str, **extra: str) -> subprocess.Popen[str]:
        return start_ctrain("pull", *args, env=self.env(**extra), cwd=self.tmp)

    def calls(self, verb: str | None = None) -> list[dict[str, object]]:
        found = fake_apptainer.calls(self.log)
        return [c for c in found if verb is None or c.get("argv", [None])[0] == verb]  # type: ignore[index]


@pytest.fixture
def fake(tmp_path: Path) -> Env:
    return Env(tmp_path)


def content(ref: str) -> bytes:
    return fake_apptainer.pulled_bytes(ref)


def start_pull(fake: Env, ref: str, stderr: Path) -> subprocess.Popen[str]:
    """``ctrain pull REF`` started, its stderr written to the file ``stderr`` as it goes."""
    with stderr.open("w") as err:
        return subprocess.Popen(
            [CTRAIN, "pull", ref], env=ctrain_env(fake.env()), cwd=fake.tmp,
            stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip


def says_it_waits(stderr: Path) -> bool:
    return "waiting for another pull" in stderr.read_text()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_first_pull_argv_environment_target_and_sidecar(fake: Env) -> None:
    done = fake.run(REF_A)
    assert done.returncode == 0, done.stderr
    target = fake.cache / "images" / "docker_registry.example_team_train_1.sif"
    assert done.stdout.strip() == f"pulled {REF_A} -> {target}"
    assert target.read_bytes() == content(REF_A)

    pulls, inspects = fake.calls("pull"), fake.calls("inspect")
    assert len(pulls) == 1 and len(inspects) == 1
    argv = pulls[0]["argv"]
    assert isinstance(argv, list) and argv[:2] == ["pull", "--disable-cache"] and argv[3] == REF_A
    temp = Path(argv[2])
    assert temp.parent == target.parent
    assert re.fullmatch(
        r"\.docker_registry\.example_team_train_1\.sif\.pull-\d+-[0-9a-f]{8}", temp.name
    )
    assert inspects[0]["argv"] == ["inspect", str(temp)]
    # apptainer's temporary files on the node, not in the cache: in a directory of ctrain's own
    # there, removed when the pull ends
    scratch = Path(str(pulls[0]["env"]["APPTAINER_TMPDIR"]))  # type: ignore[index]
    assert scratch.parent == fake.node_tmp and scratch.name.startswith("ctrain-apptainer-")
    assert pulls[0]["env"] == {
        "APPTAINER_CACHEDIR": str(fake.cache),
        "APPTAINER_TMPDIR": str(scratch),
        "SINGULARITY_CACHEDIR": str(fake.cache),
        "SINGULARITY_TMPDIR": str(scratch),
    }
    assert list(fake.node_tmp.iterdir()) == []
    assert not temp.exists()
    assert not (fake.cache / "cache").exists()  # stored once: nothing in apptainer's cache

    sidecar = read_sidecar(sidecar_of(target))
    assert sidecar is not None
    assert (sidecar.ref, sidecar.runtime, sidecar.ctrain_version) == (REF_A, "apptainer", "0.1.0")
    assert sidecar.size == len(content(REF_A)) and sidecar.target == str(target)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", sidecar.pulled_at)
    assert oct(fake.cache.stat().st_mode & 0o777) == "0o700"


def test_second_pull_downloads_nothing_and_force_does(fake: Env) -> None:
    assert fake.run(REF_A).returncode == 0
    target = fake.cache / "images" / references.image_filename(REF_A)
    sidecar_before = sidecar_of(target).read_bytes()

    again = fake.run(REF_A)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"up to date: {target}") and "nothing downloaded" in again.stdout
    assert len(fake.calls("pull")) == 1
    assert sidecar_of(target).read_bytes() == sidecar_before

    forced = fake.run("--force", REF_A)
    assert forced.returncode == 0, forced.stderr
    assert len(fake.calls("pull")) == 2
    assert fake.calls("pull")[1]["argv"][2] == "--force"  # type: ignore[index]


def test_ref_defaults_to_the_image_setting(fake: Env) -> None:
    done = fake.run(CTRAIN_IMAGE=REF_B)
    assert done.returncode == 0, done.stderr
    assert (fake.cache / "images" / references.image_filename(REF_B)).read_bytes() == content(REF_B)


def test_output_file_and_directory(fake: Env) -> None:
    (fake.tmp / "out dir").mkdir()
    done = fake.run(REF_A, "-o", "out dir")
    assert done.returncode == 0, done.stderr
    assert (fake.tmp / "out dir" / references.image_filename(REF_A)).read_bytes() == content(REF_A)
    named = fake.tmp / "out dir" / 'train\'s "image".sif'
    done = fake.run(REF_A, "-o", str(named))
    assert done.returncode == 0, done.stderr
    assert named.read_bytes() == content(REF_A)
    assert read_sidecar(sidecar_of(named)) is not None


def test_a_damaged_target_is_pulled_again(fake: Env) -> None:
    assert fake.run(REF_A).returncode == 0
    target = fake.cache / "images" / references.image_filename(REF_A)
    with target.open("r+b") as handle:
        handle.truncate(5000)
    done = fake.run(REF_A)
    assert done.returncode == 0, done.stderr
    assert "damaged" in done.stderr and len(fake.calls("pull")) == 2
    assert target.read_bytes() == content(REF_A)


def test_another_ref_at_an_output_needs_force(fake: Env) -> None:
    target = fake.tmp / "img.sif"
    assert fake.run(REF_A, "-o", str(target)).returncode == 0
    before = snapshot(fake.tmp / ".")
    refused = fake.run(REF_B, "-o", str(target))
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        f"ctrain: error: {target} holds {REF_A}, not {REF_B} "
        "Fix: pass --force to replace it, or choose another -o"
    )
    assert snapshot(fake.tmp / ".") == {**before}
    assert fake.run(REF_B, "-o", str(target), "--force").returncode == 0
    assert target.read_bytes() == content(REF_B)


def test_a_file_ctrain_did_not_pull_is_not_replaced(fake: Env) -> None:
    mine = fake.tmp / "mine.sif"
    mine.write_bytes(b"my own work")
    refused = fake.run(REF_A, "-o", str(mine))
    assert refused.returncode == 2 and "was not pulled by ctrain" in refused.stderr
    assert mine.read_bytes() == b"my own work" and fake.calls("pull") == []


SIZE = len(content("x"))  # header + payload of every image the fake pulls


def held_download(fake: Env, number: int, written: int) -> Path:
    """The temporary file of apptainer's ``number``-th pull, once the stand-in holds after
    ``written`` bytes of the image (FAKE_APPTAINER_HOLD: it goes on only at SIGUSR1)."""
    wait_for(lambda: len(fake.calls("pull")) == number, f"pull {number} to start apptainer")
    temp = Path(fake.calls("pull")[-1]["argv"][-2])  # type: ignore[index]
    wait_for(lambda: temp.exists() and temp.stat().st_size >= written, f"{written} bytes written")
    return temp


# Killed once the temporary file holds the header, about a third, about two thirds of the image
# (the stand-in holds there until killed: the pull is still going, whatever the machine's load).
@pytest.mark.parametrize("written", [4096, SIZE // 3, 2 * SIZE // 3])
def test_sigkill_mid_pull_keeps_the_previous_target_and_the_next_pull_cleans_up(
    fake: Env, written: int
) -> None:
    target = fake.tmp / "img.sif"
    assert fake.run(REF_A, "-o", str(target)).returncode == 0
    previous = snapshot(fake.tmp)

    slow = fake.start(REF_B, "-o", str(target), "--force", FAKE_APPTAINER_HOLD=str(written))
    temp = held_download(fake, 2, written)
    slow.send_signal(signal.SIGKILL)
    slow.communicate(timeout=TIMEOUT)
    orphan = int(fake.calls("pull")[1]["pid"])  # type: ignore[arg-type]
    try:
        assert target.read_bytes() == content(REF_A)
        assert read_sidecar(sidecar_of(target)).ref == REF_A  # type: ignore[union-attr]
        assert temp.exists()  # left behind: SIGKILL gives ctrain no chance
        after_kill = snapshot(fake.tmp)
        for name in ("img.sif", "img.sif.json"):
            assert after_kill[name] == previous[name]
    finally:
        if alive(orphan):  # the fake apptainer ctrain started, orphaned by the kill
            os.kill(orphan, signal.SIGKILL)

    done = fake.run(REF_B, "-o", str(target), "--force")
    assert done.returncode == 0, done.stderr
    assert f"removed {temp}, left by an interrupted pull" in done.stderr
    assert not temp.exists()
    assert not [p for p in fake.tmp.iterdir() if ".pull-" in p.name]
    assert target.read_bytes() == content(REF_B)


def test_sigterm_mid_pull_stops_the_download_and_removes_its_file(fake: Env) -> None:
    target = fake.tmp / "img.sif"
    assert fake.run(REF_A, "-o", str(target)).returncode == 0
    slow = fake.start(REF_B, "-o", str(target), "--force", FAKE_APPTAINER_HOLD=str(SIZE // 2))
    temp = held_download(fake, 2, SIZE // 2)
    slow.send_signal(signal.SIGTERM)
    _, err = slow.communicate(timeout=TIMEOUT)
    child = int(fake.calls("pull")[1]["pid"])  # type: ignore[arg-type]
    assert slow.returncode == 130
    assert err.strip().splitlines()[-1] == (
        "ctrain: error: pull stopped by SIGTERM; the previous image is untouched "
        "Fix: run the same ctrain pull again"
    )
    assert "Traceback" not in err
    assert not temp.exists()
    wait_for(lambda: not alive(child), "the apptainer child to be gone", timeout=10)
    assert target.read_bytes() == content(REF_A)


def test_three_concurrent_pulls_download_once(fake: Env) -> None:
    """The first pull's download holds (FAKE_APPTAINER_HOLD) until both others wait for it:
    who waits does not depend on how fast the machine starts them."""
    first = fake.start(REF_A, FAKE_APPTAINER_HOLD="0")
    held_download(fake, 1, 0)
    said = [fake.tmp / "stderr-1", fake.tmp / "stderr-2"]
    others = [start_pull(fake, REF_A, path) for path in said]
    for path in said:
        wait_for(functools.partial(says_it_waits, path), f"the pull writing {path.name} to wait")
    os.kill(int(str(fake.calls("pull")[0]["pid"])), signal.SIGUSR1)  # the download goes on
    procs = [first, *others]
    results = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], results
    assert len(fake.calls("pull")) == 1
    outs = [out.split(":")[0].split(" ")[0] for out, _ in results]
    assert outs == ["pulled", "up", "up"]
    for path in said:
        assert f"ctrain pull, pid {first.pid} on " in path.read_text()
    target = fake.cache / "images" / references.image_filename(REF_A)
    assert target.read_bytes() == content(REF_A)
    assert not [p for p in target.parent.iterdir() if ".pull-" in p.name]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"FAKE_APPTAINER_FAIL": "pull"}, "apptainer pull docker://"),
        ({"FAKE_APPTAINER_BAD": "1"}, "wrote no valid SIF image"),
        ({"FAKE_APPTAINER_FAIL": "inspect"}, "apptainer inspect of the pulled image failed"),
    ],
)
def test_failed_pulls_leave_the_previous_target(
    fake: Env, extra: dict[str, str], words: str
) -> None:
    target = fake.tmp / "img.sif"
    assert fake.run(REF_A, "-o", str(target)).returncode == 0
    files_before = files(fake.tmp)
    done = fake.run(REF_B, "-o", str(target), "--force", **extra)
    assert done.returncode == 5
    lines = done.stderr.strip().splitlines()
    assert words in lines[-1] and " Fix: " in lines[-1] and "Traceback" not in done.stderr
    assert files(fake.tmp) == files_before  # target and sidecar as they were, no temporary


def files(directory: Path) -> dict[str, bytes | None]:
    """What a pull may change, without its log and lock files (the lock records its holder) and
    Apptainer's own cache (cache/cache: what apptainer downloaded stays there)."""
    return {
        k: v
        for k, v in snapshot(directory).items()
        if k != "calls.jsonl" and not k.endswith(".lock") and not k.startswith("cache/cache")
    }


@pytest.mark.parametrize(
    ("args", "extra", "words"),
    [
        (["registry.example/x:1"], {}, "has no scheme Fix: write docker://registry.example/x:1"),
        (["ftp://x"], {}, "apptainer cannot pull 'ftp://x'"),
        ([REF_A, "-o", "nowhere/x.sif"], {}, "does not exist Fix: create it"),
        ([REF_A, "--runtime", "docker", "-o", "x.sif"], {}, "-o/--output has no meaning"),
        ([REF_A, "--runtime", "host"], {}, "has no images to pull"),
        ([REF_A, "--runtime", "rocket"], {}, "'--runtime': 'rocket' is not one of 'auto'"),
        ([REF_A, "--min-free-gb", "0"], {}, "--min-free-gb '0': must be a positive integer"),
        ([REF_A], {"CTRAIN_CACHE_DIR": ""}, "no directory for the Apptainer cache"),
        ([REF_A], {"CTRAIN_RUNTIME": "nope"}, "CTRAIN_RUNTIME='nope'"),
        ([REF_A], {"CTRAIN_IMAGE": "x"}, None),
        ([], {"CTRAIN_IMAGE": ""}, "no image reference given"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    fake: Env, args: list[str], extra: dict[str, str], words: str | None
) -> None:
    if words is None:  # CTRAIN_IMAGE is only a default: an explicit REF wins
        assert fake.run(*args, **extra).returncode == 0
        return
    before = snapshot(fake.tmp)
    done = fake.run(*args, **extra)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctrain: error: ") and " Fix: " in lines[0]
    assert words in lines[0]
    assert done.stdout == ""
    assert snapshot(fake.tmp) == before and not fake.cache.exists()


def test_too_little_free_space_is_refused_before_a_download(fake: Env) -> None:
    done = fake.run(REF_A, CTRAIN_MIN_FREE_GB="100000000")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert "GiB needed" in lines[-1] and "CTRAIN_MIN_FREE_GB" in lines[-1]
    assert fake.calls("pull") == []
    assert not (fake.cache / "images" / references.image_filename(REF_A)).exists()


def test_singularity_runtime_uses_the_singularity_program(fake: Env) -> None:
    fake_apptainer.install(fake.tmp / "bin", "singularity")
    done = fake.run(REF_A, "--runtime", "singularity")
    assert done.returncode == 0, done.stderr
    sidecar = read_sidecar(sidecar_of(fake.cache / "images" / references.image_filename(REF_A)))
    assert sidecar is not None and sidecar.runtime == "singularity"


def test_apptainers_own_output_is_passed_through_unless_progress_is_off(fake: Env) -> None:
    said = "INFO:    Converting OCI blobs to SIF format (docker://registry.example/team/train:1)"
    done = fake.run(REF_A)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[1:] == [said]
    quiet = fake.run("--force", "--progress", "off", REF_A)
    assert quiet.returncode == 0, quiet.stderr
    assert said not in quiet.stderr and len(quiet.stderr.splitlines()) == 1
