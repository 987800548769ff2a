"""`ctrain exec/run/shell` end to end through the Apptainer stand-in
(tests/support/fake_apptainer.py), which runs the command for real: ``ctrain launch`` and the user's
command run inside it.

Apptainer cannot be installed on the test machines; this checks the exact argv and environment
ctrain hands it, what the command then gets (its environment, binds, exit code) and the cache
placement.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest

import ctrain as ctrain_package
from tests.support import fake_apptainer
from tests.support.helpers import run_ctrain


@pytest.fixture
def fake(tmp_path: Path) -> dict[str, str]:
    box = fake_apptainer.with_standin(
        tmp_path,
        "apptainer",
        "singularity",
        SLURM_JOB_ID="7",
        PYTHONPATH="/leak",
        FAKE_APPTAINER_IMAGE_ENV=json.dumps(fake_apptainer.ctrain_image_env()),
    )
    fake_apptainer.make_sif(tmp_path / "img.sif", fake_apptainer.ctrain_image_env())
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "marker").write_text("seen")
    (tmp_path / "mnt").mkdir()
    return box.env


def ctrain(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_ctrain(*args, env=env, cwd=cwd)


def record(env: dict[str, str]) -> dict[str, object]:
    return fake_apptainer.calls(Path(env["FAKE_APPTAINER_LOG"]))[-1]


def ran(env: dict[str, str]) -> list[dict[str, object]]:
    """The calls besides the version probe (``apptainer --version``) planning asks."""
    log = Path(env["FAKE_APPTAINER_LOG"])
    found = fake_apptainer.calls(log) if log.exists() else []
    return [call for call in found if call["argv"] != ["--version"]]


def test_exec_hands_apptainer_the_exact_command(fake: dict[str, str], tmp_path: Path) -> None:
    """The argv and variables ctrain hands apptainer, and what the command then sees: the
    read-only bind (a real bind mount in the stand-in), the variables, its exit code."""
    mnt = tmp_path / "mnt"
    check = f'test "$(cat {mnt}/marker)" = seen && ! touch {mnt}/new 2>/dev/null && exit 3'
    done = ctrain(
        [
            "exec",
            "--nv",
            "-B",
            f"{tmp_path / 'data'}:{mnt}:ro",
            "--env",
            "A=1,2",
            str(tmp_path / "img.sif"),
            "--",
            "sh",
            "-c",
            check,
        ],
        fake,
        tmp_path,
    )
    assert done.returncode == 3, done.stderr  # the command's exit code is ctrain's
    got = record(fake)
    assert got["argv"] == [
        "exec",
        "--cleanenv",
        "--no-eval",
        "--nv",
        "--bind",
        f"{tmp_path / 'data'}:{mnt}:ro",
        "--bind",
        f"{Path(ctrain_package.__file__).parent}:/opt/ctrain-carried/api/ctrain:ro",
        "--bind",
        f"{Path(click.__file__).parent}:/opt/ctrain-carried/lib/click:ro",
        str(tmp_path / "img.sif"),
        "/bin/sh",
        "/opt/ctrain-carried/api/ctrain/container/boot.sh",
        "--lib",
        "/opt/ctrain-carried/lib",
        "--",
        "sh",
        "-c",
        check,
    ]
    env = got["env"]
    assert isinstance(env, dict)
    assert env["APPTAINERENV_A"] == "1,2"
    assert env["APPTAINERENV_SLURM_JOB_ID"] == "7"
    assert env["APPTAINERENV_PYTHONNOUSERSITE"] == "1"
    assert "APPTAINERENV_PYTHONPATH" not in env
    inside = got["container"]["env"]  # type: ignore[index]
    assert inside["A"] == "1,2" and inside["SLURM_JOB_ID"] == "7"
    assert inside["PYTHONPATH"] == fake_apptainer.ctrain_image_env()["PYTHONPATH"]  # the image's
    assert not (tmp_path / "data" / "new").exists()


def test_singularity_gets_its_own_prefix(fake: dict[str, str], tmp_path: Path) -> None:
    done = ctrain(
        ["run", "--runtime", "singularity", str(tmp_path / "img.sif"), "--", "true"],
        fake,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    got = record(fake)
    assert got["argv"] == [
        "run",
        "--cleanenv",
        "--no-eval",
        str(tmp_path / "img.sif"),
        "true",
    ]
    assert "SINGULARITYENV_SLURM_JOB_ID" in got["env"]  # type: ignore[operator]
    assert got["container"]["env"]["SLURM_JOB_ID"] == "7"  # type: ignore[index]


def test_remote_image_cache_is_kept_out_of_home(fake: dict[str, str], tmp_path: Path) -> None:
    refused = ctrain(["exec", "docker://example/img:1", "--", "true"], fake, tmp_path)
    assert refused.returncode != 0
    assert refused.stderr.count("\n") == 1 and "CTRAIN_CACHE_DIR" in refused.stderr
    assert not ran(fake)

    cache = tmp_path / "scratch" / "cache"
    env = {**fake, "CTRAIN_CACHE_DIR": str(cache), "CTRAIN_MIN_FREE_GB": "1"}
    done = ctrain(["exec", "docker://example/img:1", "--", "true"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    found = fake_apptainer.calls(Path(fake["FAKE_APPTAINER_LOG"]))
    pulled = next(c for c in found if c.get("argv", [""])[0] == "pull")  # type: ignore[index]
    got = pulled["env"]
    assert isinstance(got, dict)
    assert got["APPTAINER_CACHEDIR"] == str(cache)
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    assert record(fake)["container"]["image"].startswith(str(cache / "images"))  # type: ignore[index]

    home_ok = ctrain(
        ["exec", "--allow-home-cache", "docker://example/img:1", "--", "true"],
        {**fake, "CTRAIN_MIN_FREE_GB": "1"},
        tmp_path,
    )
    assert home_ok.returncode == 0, home_ok.stderr


def test_dry_run_prints_and_runs_nothing(fake: dict[str, str], tmp_path: Path) -> None:
    done = ctrain(
        ["exec", "--dry-run", str(tmp_path / "img.sif"), "--", "echo", "a b"], fake, tmp_path
    )
    assert done.returncode == 0
    first = done.stdout.splitlines()[0]
    boot = "/bin/sh /opt/ctrain-carried/api/ctrain/container/boot.sh --lib /opt/ctrain-carried/lib"
    assert first.endswith(f"{boot} -- echo 'a b'")
    assert "  env SLURM_JOB_ID=7" in done.stdout.splitlines()
    assert not ran(fake)


def test_dry_run_hides_secrets_unless_asked(fake: dict[str, str], tmp_path: Path) -> None:
    """Job logs are often world-readable: a secret-looking variable's value and a URL's
    password are printed as <hidden>; --show-secrets (CTRAIN_SHOW_SECRETS) prints them. The
    container still gets them (test_golden_oracles: values arrive verbatim)."""
    proxy = "http://alice:pa55w0rd@proxy.site:3128"
    args = ["exec", "--dry-run", "--env", "WANDB_API_KEY=k-123", "--env", f"HTTPS_PROXY={proxy}"]
    args += [str(tmp_path / "img.sif"), "--", "true"]
    hidden = ctrain(args, fake, tmp_path)
    assert hidden.returncode == 0, hidden.stderr
    assert "k-123" not in hidden.stdout and "pa55w0rd" not in hidden.stdout
    lines = hidden.stdout.splitlines()
    assert "  env WANDB_API_KEY='<hidden>'" in lines
    assert "  env HTTPS_PROXY='http://alice:<hidden>@proxy.site:3128'" in lines
    for shown in (ctrain([*args[:2], "--show-secrets", *args[2:]], fake, tmp_path),
                  ctrain(args, {**fake, "CTRAIN_SHOW_SECRETS": "1"}, tmp_path)):  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "  env WANDB_API_KEY=k-123" in shown.stdout.splitlines()
        assert f"  env HTTPS_PROXY={proxy}" in shown.stdout.splitlines()


def test_dry_run_shows_the_pull_the_exec_needs(fake: dict[str, str], tmp_path: Path) -> None:
    """--dry-run prints the exact argv, and for a remote image the pull into the cache (here
    from ./ctrain.toml) that comes first; the exec then runs that local file."""
    args = ["exec", "docker://example/img:1", "--", "true"]
    refused = ctrain(["exec", "--dry-run", *args[1:]], fake, tmp_path)
    assert refused.returncode != 0 and "CTRAIN_CACHE_DIR" in refused.stderr  # decided in planning

    cache = tmp_path / "scratch" / "cache"
    (tmp_path / "ctrain.toml").write_text(f'cache_dir = "{cache}"\nmin_free_gb = 1\n')
    shown = ctrain(["exec", "--dry-run", *args[1:]], fake, tmp_path)
    assert shown.returncode == 0, shown.stderr
    target = cache / "images" / "docker_example_img_1.sif"
    lines = shown.stdout.splitlines()
    pulled = (
        f"  pulled first: ctrain pull docker://example/img:1, then {target} is run in its place"
    )
    assert pulled in lines
    pull_env = dict(
        shlex.split(line.removeprefix("  pull env "))[0].split("=", 1)
        for line in lines
        if line.startswith("  pull env ")
    )
    assert pull_env["APPTAINER_CACHEDIR"] == str(cache)  # and its temporary space
    assert set(pull_env) == {"APPTAINER_CACHEDIR", "APPTAINER_TMPDIR"} | {
        "SINGULARITY_CACHEDIR",
        "SINGULARITY_TMPDIR",
    }
    assert not cache.exists() and not ran(fake)  # nothing ran

    done = ctrain(args, fake, tmp_path)
    assert done.returncode == 0, done.stderr
    argv = shlex.split(lines[0])[1:]
    assert record(fake)["argv"] == [str(target) if a == args[1] else a for a in argv]
    found = fake_apptainer.calls(Path(fake["FAKE_APPTAINER_LOG"]))
    pull = next(c for c in found if c.get("argv", [""])[0] == "pull")  # type: ignore[index]
    ran_env = {k: pull["env"][k] for k in pull_env}  # type: ignore[index]
    for name in ("APPTAINER_TMPDIR", "SINGULARITY_TMPDIR"):  # a directory of its own in there
        made = Path(ran_env.pop(name))
        assert made.parent == Path(pull_env.pop(name))
        assert made.name.startswith("ctrain-apptainer-") and not made.exists()
    assert ran_env == pull_env


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["exec", "-B", "/nonexistent-src:/x", "IMG", "--", "x"], "bind source"),
        (["exec", "-B", "/tmp:rw", "IMG", "--", "x"], "directory called 'rw'"),
        (["exec", "--env", "1BAD=x", "IMG", "--", "x"], "NAME=VALUE"),
        (["exec", "IMG"], "no command given"),
        (["exec", "--overlay", "/nonexistent.img", "IMG", "--", "x"], "overlay"),
        (["exec", "--runtime", "docker", "--overlay", "OVL", "img", "--", "x"], "docker cannot"),
        (["exec", "--runtime", "host", "-B", "/tmp", "--", "x"], "needs a container"),
        (["exec", "/nonexistent.sif", "--", "x"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_runs_nothing(
    fake: dict[str, str], tmp_path: Path, args: list[str], words: str
) -> None:
    (tmp_path / "ovl.img").write_bytes(b"")
    args = [
        str(tmp_path / "img.sif") if a == "IMG" else str(tmp_path / "ovl.img") if a == "OVL" else a
        for a in args
    ]
    env = {**fake, "PATH": f"{fake['PATH']}:{os.path.dirname(sys.executable)}"}
    done = ctrain(args, env, tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert not ran(fake)
