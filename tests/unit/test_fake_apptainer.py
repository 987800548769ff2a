"""The Apptainer stand-in (tests/fake_apptainer.py) does what /work/shared/apptainer-facts.md says
Apptainer does, for the part it claims to model: run as a program, as ctrain runs it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests import fake_apptainer
from tests.helpers import Sandbox, sandbox


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    made = sandbox(tmp_path, FAKE_APPTAINER_LOG=str(tmp_path / "calls.jsonl"), TERM="xterm")
    for name in ("apptainer", "singularity"):
        fake_apptainer.install(made.bin, name)
    (tmp_path / "img.sif").write_bytes(b"")
    return made


def apptainer(
    box: Sandbox, *args: str, program: str = "apptainer", **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(box.bin / program), *args],
        env=box.with_env(**extra),
        cwd=box.root,
        capture_output=True,
        text=True,
        timeout=60,
    )


def container(box: Sandbox) -> dict[str, object]:
    found = fake_apptainer.calls(box.root / "calls.jsonl")[-1]["container"]
    assert isinstance(found, dict)
    return found


def container_env(box: Sandbox) -> dict[str, str]:
    env = container(box)["env"]
    assert isinstance(env, dict)
    return env


def test_flags_end_at_the_first_positional_argument(box: Sandbox) -> None:
    done = apptainer(box, "exec", "--nv", "img.sif", "python", "--nv", "--lr", "0.1")
    assert done.returncode == 0, done.stderr
    got = container(box)
    assert got["command"] == ["python", "--nv", "--lr", "0.1"] and got["nv"] is True


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "img.sif"],  # exec needs IMAGE and CMD
        ["run"],
        ["exec", "--no-such-flag", "img.sif", "true"],
        ["pull", "a.sif", "b.sif", "docker://x/y:1"],
        ["build", "out.sif"],
        ["inspect", "img.sif", "other.sif"],
        ["overlay", "create", "--size", "63", "o.img"],
        ["overlay", "create", "--size", "1G", "o.img"],  # whole MiB, no units
    ],
)
def test_usage_errors_exit_255(box: Sandbox, args: list[str]) -> None:
    done = apptainer(box, *args)
    assert done.returncode == 255 and done.stderr.startswith("FATAL:")


def test_the_exit_status_is_the_commands(box: Sandbox) -> None:
    assert apptainer(box, "run", "img.sif", FAKE_APPTAINER_EXIT="7").returncode == 7


def test_binds_comma_lists_relative_sources_and_missing_sources(box: Sandbox) -> None:
    (box.root / "data").mkdir()
    done = apptainer(box, "exec", "-B", "data:/d:ro,/tmp", "--bind=/tmp:/t", "img.sif", "true")
    assert done.returncode == 0, done.stderr
    assert container(box)["binds"] == [
        {"src": str(box.root / "data"), "dst": "/d", "readonly": True},
        {"src": "/tmp", "dst": "/tmp", "readonly": False},
        {"src": "/tmp", "dst": "/t", "readonly": False},
    ]
    missing = apptainer(box, "exec", "-B", "/no/such/dir:/x", "img.sif", "true")
    assert missing.returncode == 255 and "/no/such/dir" in missing.stderr


def test_overlays_one_writable_and_not_with_writable_tmpfs(box: Sandbox) -> None:
    for name in ("a.img", "b.img"):
        (box.root / name).write_bytes(b"")
    ok = apptainer(box, "exec", "-o", "a.img:ro", "-o", "b.img:rw", "img.sif", "true")
    assert ok.returncode == 0, ok.stderr
    assert container(box)["overlays"] == [
        {"path": "a.img", "readonly": True},
        {"path": "b.img", "readonly": False},  # anything but ro after the colon is read-write
    ]
    two = apptainer(box, "exec", "-o", "a.img", "-o", "b.img", "img.sif", "true")
    tmpfs = apptainer(box, "exec", "--writable-tmpfs", "-o", "a.img", "img.sif", "true")
    assert two.returncode == tmpfs.returncode == 255


def test_cleanenv_keeps_term_and_proxies_and_injects_prefixed_variables(box: Sandbox) -> None:
    done = apptainer(
        box,
        "exec",
        "--cleanenv",
        "img.sif",
        "true",
        USER="me",
        https_proxy="http://p:1",
        APPTAINERENV_A="1,2",
        APPTAINERENV_HOME="/elsewhere",
        APPTAINERENV_PREPEND_PATH="/opt/bin",
    )
    assert done.returncode == 0, done.stderr
    env = container_env(box)
    assert env["TERM"] == "xterm" and env["https_proxy"] == "http://p:1" and env["LANG"] == "C"
    assert "USER" not in env and "FAKE_APPTAINER_LOG" not in env
    assert env["A"] == "1,2" and env["HOME"] == str(box.home)
    assert env["PATH"] == "/opt/bin:" + fake_apptainer.DEFAULT_PATH
    assert "APPTAINERENV_HOME is not permitted" in done.stderr


def test_without_cleanenv_the_host_environment_passes_but_not_path_or_home(box: Sandbox) -> None:
    done = apptainer(box, "exec", "img.sif", "true", USER="me", APPTAINER_BIND="/tmp")
    assert done.returncode == 0, done.stderr
    env = container_env(box)
    assert env["USER"] == "me" and env["PATH"] == fake_apptainer.DEFAULT_PATH
    assert "APPTAINER_BIND" not in env


def test_injected_values_are_shell_evaluated_unless_no_eval(box: Sandbox) -> None:
    values = {"APPTAINERENV_A": "$HOME", "APPTAINERENV_B": "a`echo x`b"}
    assert apptainer(box, "exec", "-e", "img.sif", "true", **values).returncode == 0
    assert (container_env(box)["A"], container_env(box)["B"]) == (str(box.home), "axb")
    assert apptainer(box, "exec", "-e", "--no-eval", "img.sif", "true", **values).returncode == 0
    assert (container_env(box)["A"], container_env(box)["B"]) == ("$HOME", "a`echo x`b")
    broken = apptainer(box, "exec", "-e", "img.sif", "true", APPTAINERENV_C="ends\\")
    assert broken.returncode == 255


def test_env_flag_splits_at_commas_and_wins(box: Sandbox) -> None:
    done = apptainer(box, "exec", "--env", "A=1,B=2", "img.sif", "true", APPTAINERENV_A="0")
    assert done.returncode == 0, done.stderr
    assert (container_env(box)["A"], container_env(box)["B"]) == ("1", "2")


def test_singularity_is_singularity_ce(box: Sandbox) -> None:
    done = apptainer(
        box,
        "exec",
        "img.sif",
        "true",
        program="singularity",
        SINGULARITYENV_A="s",
        APPTAINERENV_B="a",
    )
    assert done.returncode == 0, done.stderr
    env = container_env(box)
    assert env["A"] == "s" and "B" not in env
    assert apptainer(box, "--version", program="singularity").stdout.startswith("singularity-ce")


def test_remote_images_go_through_the_cache(box: Sandbox) -> None:
    assert apptainer(box, "exec", "docker://x/y:1", "true").returncode == 0
    assert len(list((box.home / ".apptainer" / "cache" / "cache" / "oci-tmp").iterdir())) == 1
    cache = box.root / "cache"
    done = apptainer(box, "exec", "docker://x/y:1", "true", APPTAINER_CACHEDIR=str(cache))
    assert done.returncode == 0 and (cache / "cache" / "oci-tmp").is_dir()
    refused = apptainer(box, "exec", "docker-daemon://x:1", "true")
    assert refused.returncode == 255 and "invalid reference format" in refused.stderr


def test_pull_names_refuses_to_overwrite_and_forces(box: Sandbox) -> None:
    assert apptainer(box, "pull", "docker://registry.example/team/train:1").returncode == 0
    assert fake_apptainer.is_sif(box.root / "train_1.sif")
    again = apptainer(box, "pull", "docker://registry.example/team/train:1")
    assert again.returncode == 255 and "Image file already exists" in again.stderr
    forced = apptainer(box, "pull", "--force", "--dir", "home", "x.sif", "docker://a/b")
    assert forced.returncode == 0 and fake_apptainer.is_sif(box.home / "x.sif")
    assert apptainer(box, "pull", "docker://a/b").returncode == 0
    assert (box.root / "b_latest.sif").exists()


def test_build_checks_the_definition_and_its_build_args(box: Sandbox) -> None:
    recipe = box.root / "r.def"
    recipe.write_text("Bootstrap: docker\nFrom: debian:{{ V }}\n\n%arguments\n    V=12\n")
    assert apptainer(box, "build", "--build-arg", "V=11", "o.sif", "r.def").returncode == 0
    unused = apptainer(box, "build", "--force", "--build-arg", "W=1", "o.sif", "r.def")
    assert unused.returncode == 255 and "W" in unused.stderr
    args = ["--force", "--warn-unused-build-args", "--build-arg", "W=1", "o.sif", "r.def"]
    assert apptainer(box, "build", *args).returncode == 0
    recipe.write_text("Bootstrap: docker\nFrum: debian\n")
    assert apptainer(box, "build", "--force", "o.sif", "r.def").returncode == 255


def test_inspect_wants_a_sif_and_overlay_create_a_new_path(box: Sandbox) -> None:
    assert apptainer(box, "inspect", "img.sif").returncode == 255  # empty: not a SIF
    header, body = fake_apptainer.sif_bytes("x", 10)
    (box.root / "ok.sif").write_bytes(header + body)
    assert apptainer(box, "inspect", "ok.sif").returncode == 0
    assert apptainer(box, "overlay", "create", "o.img").returncode == 0
    assert (box.root / "o.img").stat().st_size == 64 * 1024**2  # the default size
    assert apptainer(box, "overlay", "create", "--size", "128", "o.img").returncode == 255


def test_every_call_is_logged_with_the_programs_own_variables(box: Sandbox) -> None:
    apptainer(box, "inspect", "img.sif", APPTAINER_CACHEDIR="/c", OTHER="x")
    (line,) = (box.root / "calls.jsonl").read_text().splitlines()
    logged = json.loads(line)
    assert logged["argv"] == ["inspect", "img.sif"] and logged["env"] == {
        "APPTAINER_CACHEDIR": "/c"
    }
