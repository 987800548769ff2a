"""``ctrain pull --runtime charliecloud``: references, argv, and the pull's rename, record and
reuse against a stand-in Docker engine (an object answering the API calls the export makes:
the export a few bytes) and a stand-in ``ch-convert`` shell script (the conversion a
directory). The real ones are tests/integration/test_charliecloud.py's."""

from __future__ import annotations

import concurrent.futures
import fcntl
import os
import time
from pathlib import Path

import pytest

from ctrain.errors import ConfigError, ExternalToolError, PullError
from ctrain.images import docker_api, pull
from ctrain.images.cachedir import CacheChoice
from ctrain.images.record import read_sidecar
from ctrain.images.stores import charliecloud
from ctrain.images.stores.base import PullAsk, Pulling
from tests.support.helpers import SYSTEM_PATH

# Writes OUT/bin, OUT/ch and OUT/made (its call number), or fails when $FAIL is set; logs each
# call; takes $SLOW seconds when set.
FAKE_CONVERT = """#!/bin/sh
for last; do :; done
echo "$*" >> "$LOG"
[ -n "$SLOW" ] && sleep "$SLOW"
[ -n "$FAIL" ] && { echo "ch-convert: it broke" >&2; exit 1; }
mkdir -p "$last/bin" "$last/ch" && wc -l < "$LOG" | tr -d ' ' > "$last/made"
touch -d 2001-01-01 "$last"  # as tar leaves the image's own times
"""


class FakeEngine:
    """The Docker API calls of an export, recorded; the image's ENV written here."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def inspect_image(self, ref: str) -> dict[str, object]:
        self.calls.append(("inspect_image", ref))
        return {
            "Id": "sha256:1",
            "Config": {"Env": ["PATH=/opt/venv/bin:/usr/bin", "LANG=C.UTF-8"]},
        }

    def create_container(self, ref: str, command: str) -> dict[str, str]:
        self.calls.append(("create_container", ref, command))
        return {"Id": "c0ffee"}

    def export(self, container: str) -> list[bytes]:
        self.calls.append(("export", container))
        return [b"ta", b"r\n"]

    def remove_container(self, container: str) -> None:
        self.calls.append(("remove_container", container))


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    fake = FakeEngine()
    monkeypatch.setattr(docker_api, "connect", lambda environ: fake)
    return fake


@pytest.fixture
def tools(tmp_path: Path, engine: FakeEngine) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("ch-convert", FAKE_CONVERT), ("ch-run", "")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir / "ch-run"


def run_pull(
    tools: Path, tmp: Path, ref: str = "docker-daemon://img:1", force: bool = False, **env: str
) -> pull.PullResult:
    cache = tmp / "cache"
    plan = pull.plan(
        PullAsk(ref=ref, runtime="charliecloud", program=str(tools), cache_root=cache, force=force)
    )
    path = f"{tools.parent}:{SYSTEM_PATH}"
    environ = {**os.environ, "LOG": str(tmp / "calls"), "PATH": path, **env}
    choice = CacheChoice(cache, "test", False)
    return pull.pull(plan, Pulling(choice, environ, 0, lambda line: None, tmpdir=tmp))


def test_pull_converts_once_then_reuses(tools: Path, engine: FakeEngine, tmp_path: Path) -> None:
    first = run_pull(tools, tmp_path)
    target = tmp_path / "cache" / "charliecloud" / "docker-daemon_img_1"
    assert first.downloaded and first.where == str(target)
    assert (target / "made").read_text().strip() == "1"
    record = read_sidecar(target.with_name(target.name + ".json"))
    assert record is not None and record.ref == "docker-daemon://img:1"
    assert record.target == str(target) and record.runtime == "charliecloud"
    (call,) = (tmp_path / "calls").read_text().splitlines()
    *_, tar, out = call.split()
    assert call.startswith(f"--no-clobber --tmp {tmp_path} -i tar -o dir {tmp_path}/.")
    assert Path(out).parent == target.parent  # converted beside the target
    assert (
        target / "ch" / "environment"
    ).read_text() == "PATH=/opt/venv/bin:/usr/bin\nLANG=C.UTF-8\n"
    assert engine.calls == [
        ("inspect_image", "img:1"),
        ("create_container", "img:1", "/bin/true"),
        ("export", "c0ffee"),
        ("remove_container", "c0ffee"),
    ]
    assert not Path(tar).exists()  # the tarball goes once unpacked
    assert target.stat().st_mtime > time.time() - 3600  # cache clean goes by the pull's time
    again = run_pull(tools, tmp_path)
    assert not again.downloaded and again.reason == "up to date"
    assert len((tmp_path / "calls").read_text().splitlines()) == 1
    assert sorted(p.name for p in target.parent.iterdir()) == [
        target.name,
        target.name + ".json",
        target.name + ".lock",
    ]


def test_force_replaces_and_a_failure_leaves_the_previous_image(
    tools: Path, tmp_path: Path
) -> None:
    run_pull(tools, tmp_path)
    target = Path(run_pull(tools, tmp_path, force=True).where)
    assert (target / "made").read_text().strip() == "2"
    with pytest.raises(ExternalToolError, match="ch-convert: it broke") as caught:
        run_pull(tools, tmp_path, force=True, FAIL="1")
    assert "previous image is untouched" in caught.value.fix
    assert (target / "made").read_text().strip() == "2"
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]  # no temporary


def test_the_record_is_written_while_the_lock_is_held(
    tools: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pull waiting on the lock must find the record when it gets the lock, or it converts
    the image a second time: the record goes to disk before the lock is released."""
    held_at_write: list[bool] = []
    write_text = charliecloud.fs.write_text

    def watched(path: Path, text: str) -> None:
        lock = path.with_name(path.name.removesuffix(".json") + ".lock")
        fd = os.open(lock, os.O_RDONLY)
        try:  # another open file description: refused while the pull holds its flock
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held_at_write.append(False)
        except BlockingIOError:
            held_at_write.append(True)
        finally:
            os.close(fd)
        write_text(path, text)

    monkeypatch.setattr(charliecloud.fs, "write_text", watched)
    assert run_pull(tools, tmp_path).downloaded
    assert held_at_write == [True]


def test_two_pulls_at_once_convert_once(tools: Path, tmp_path: Path) -> None:
    """The second pull waits on the lock, then finds the first one's record: one conversion."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        pulls = [pool.submit(run_pull, tools, tmp_path, SLOW="1") for _ in range(2)]
        results = [future.result(timeout=60) for future in pulls]
    assert sorted(result.downloaded for result in results) == [False, True]
    assert len((tmp_path / "calls").read_text().splitlines()) == 1


def test_a_conversion_that_writes_no_image_is_the_tools_failure(
    tools: Path, tmp_path: Path
) -> None:
    """Exit 5 (ExternalToolError), as a SIF or enroot pull whose tool wrote nothing."""
    tools.with_name("ch-convert").write_text("#!/bin/sh\nfor last; do :; done\nmkdir -p $last\n")
    with pytest.raises(ExternalToolError, match="ch-convert wrote no image") as caught:
        run_pull(tools, tmp_path)
    assert caught.value.exit_code == 5
    target = tmp_path / "cache" / "charliecloud" / "docker-daemon_img_1"
    assert not target.exists() and not target.with_name(target.name + ".json").exists()


def test_resolve_finds_the_recorded_directory(tools: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    plan = pull.plan(
        PullAsk(
            ref="docker-daemon:img:1", runtime="charliecloud", program=str(tools), cache_root=cache
        )
    )
    assert plan.ref == "docker-daemon://img:1"  # both forms name one image
    assert not pull.store_of("charliecloud").recorded(plan)
    run_pull(tools, tmp_path)
    assert pull.store_of("charliecloud").recorded(plan)


@pytest.mark.parametrize("ref", ["oras://x/y:1", "img:1", "docker-daemon://", "https://x/y"])
def test_unsupported_references(ref: str) -> None:
    with pytest.raises(ConfigError, match="charliecloud cannot pull") as caught:
        charliecloud.source_of(ref)
    assert "docker-daemon://NAME:TAG" in caught.value.fix


def test_output_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="-o/--output"):
        pull.plan(
            PullAsk(
                ref="docker://r/i:1",
                runtime="charliecloud",
                program="/usr/bin/ch-run",
                output="x",
                cache_root=tmp_path,
            )
        )


def test_registry_pull_goes_through_ch_image_storage(tmp_path: Path) -> None:
    ref = "docker://registry.example/team/img:1"
    assert charliecloud.fetch_argv("/opt/ch/bin/ch-run", ref) == [
        "/opt/ch/bin/ch-image",
        "pull",
        "registry.example/team/img:1",
    ]
    assert charliecloud.fetch_argv("/opt/ch/bin/ch-run", "docker-daemon://img:1") is None
    argv = charliecloud.convert_argv("/opt/ch/bin/ch-run", "ch-image", "r/i:1", tmp_path, tmp_path)
    assert argv[0] == "/opt/ch/bin/ch-convert" and argv[5:9] == ["ch-image", "-o", "dir", "r/i:1"]
    target = tmp_path / "charliecloud" / "x"
    assert charliecloud.storage_env(target) == {
        "CH_IMAGE_STORAGE": str(tmp_path / "charliecloud" / "storage")
    }


def test_the_unpublished_default_through_ch_image_says_so(tools: Path, tmp_path: Path) -> None:
    """ch-image pull of the default image fails (no release yet): the one PullError that says
    it is not published, with ch-image's reason."""
    ch_image = tools.with_name("ch-image")
    ch_image.write_text("#!/bin/sh\necho 'error: manifest unknown' >&2\nexit 1\n")
    ch_image.chmod(0o755)
    with pytest.raises(PullError) as caught:
        run_pull(tools, tmp_path, ref=pull.default_image())
    assert caught.value.message.startswith(f"the default image {pull.default_image()} is not")
    assert "manifest unknown" in caught.value.message and "make image" in caught.value.fix
