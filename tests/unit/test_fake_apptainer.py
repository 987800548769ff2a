"""The Apptainer stand-in (tests/support/fake_apptainer.py) does what
/work/shared/apptainer-facts.md says Apptainer does: each test cites the facts line it pins
(section: row). Run as a program, as ctrain runs it; the commands it starts really run. Images,
pulls, builds and overlays: test_fake_apptainer_images.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support import fake_apptainer
from tests.support.helpers import Sandbox, sandbox, wait_for

IMAGE_PATH = "/opt/img/bin:" + fake_apptainer.DEFAULT_PATH
# $HOME, backticks, quotes, spaces, a newline: what ctrain must hand over byte for byte
WEIRD = "a $HOME `echo hi` \"dq\" 'sq' two  spaces\nline2"


@pytest.fixture
def box(tmp_path: Path) -> Sandbox:
    made = sandbox(
        tmp_path, "/usr/bin:/bin", FAKE_APPTAINER_LOG=str(tmp_path / "calls.jsonl"), TERM="xterm"
    )
    for name in ("apptainer", "singularity"):
        fake_apptainer.install(made.bin, name)
    env = {"PATH": IMAGE_PATH, "LANG": "C.UTF-8", "FROM_IMAGE": "image"}
    fake_apptainer.make_sif(tmp_path / "img.sif", env, labels={"maintainer": "me"})
    return made


apptainer = fake_apptainer.run


def container(box: Sandbox) -> dict[str, object]:
    lines = [c for c in fake_apptainer.calls(box.root / "calls.jsonl") if "container" in c]
    found = lines[-1]["container"]
    assert isinstance(found, dict)
    return found


def container_env(box: Sandbox) -> dict[str, str]:
    env = container(box)["env"]
    assert isinstance(env, dict)
    return env


def test_flags_end_at_the_first_positional_argument(box: Sandbox) -> None:
    """parsing: "Every subcommand stops parsing flags at its first positional argument"."""
    done = apptainer(box, "exec", "--nv", "img.sif", "printf", "%s|", "--nv", "--lr", "0.1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "--nv|--lr|0.1|"
    assert container(box)["command"] == ["printf", "%s|", "--nv", "--lr", "0.1"]
    assert container(box)["nv"] is True


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["exec", "img.sif"], '"exec": requires at least 2 arg(s), only received 1'),
        (["run"], '"run": requires at least 1 arg(s), only received 0'),
        (["exec", "--no-such-flag", "img.sif", "true"], '"exec": unknown flag: --no-such-flag'),
        (["pull", "a.sif", "b.sif", "docker://x/y:1"], '"pull": accepts between 1 and 2 arg(s)'),
        (["build", "out.sif"], '"build": accepts 2 arg(s), received 1'),
        (["inspect", "img.sif", "other.sif"], '"inspect": accepts 1 arg(s), received 2'),
        (["overlay", "create", "--size", "1G", "o.img"], '"create": invalid argument "1G"'),
    ],
)
def test_usage_errors_exit_1(box: Sandbox, args: list[str], said: str) -> None:
    """What Apptainer 1.4.5's parser refuses (arity, unknown flags, a flag's value) is one
    `Error for command` line and exit 1, measured (the facts file said FATAL and 255); the words
    are cobra's, as the real binary prints them (tests/integration/test_standin_differential.py)."""
    done = apptainer(box, *args)
    assert done.returncode == 1 and done.stderr.startswith(f"Error for command {said}")


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "img.sif", "no-such-program"],
        ["overlay", "create", "--size", "63", "o.img"],  # whole MiB, at least 64
    ],
)
def test_failures_exit_255(box: Sandbox, args: list[str]) -> None:
    """parsing: "When Apptainer itself fails, it exits 255": a command line it takes, then
    fails on."""
    done = apptainer(box, *args)
    assert done.returncode == 255 and "FATAL:" in done.stderr


@pytest.mark.parametrize("flag", ["--containall", "--home=/x", "--mount=type=bind", "--fakeroot"])
def test_flags_it_cannot_show_on_the_host_are_refused_loudly(box: Sandbox, flag: str) -> None:
    """Real Apptainer flags (exec: isolation knobs, namespaces, --mount) whose effect a host
    process cannot show: the stand-in refuses them rather than pretend (module docstring)."""
    done = apptainer(box, "exec", flag, "img.sif", "true")
    assert done.returncode == 255 and "FATAL:   stand-in: " in done.stderr


@pytest.mark.parametrize(
    ("program", "version", "flag_args", "known"),
    [
        ("apptainer", "1.0.3", ["exec", "--no-eval", "img.sif", "true"], False),
        ("apptainer", "1.1.0", ["exec", "--no-eval", "img.sif", "true"], True),
        ("singularity", "3.9.9", ["exec", "--no-eval", "img.sif", "true"], False),
        ("singularity", "3.10.0", ["exec", "--no-eval", "img.sif", "true"], True),
        ("apptainer", "1.1.9", ["build", "--build-arg", "A=1", "o.sif", "img.sif"], False),
        ("singularity", "3.11.5", ["build", "--build-arg", "A=1", "o.sif", "img.sif"], False),
        ("singularity", "4.0.0", ["build", "--build-arg", "A=1", "o.sif", "img.sif"], True),
    ],
)
def test_flags_newer_than_the_version_are_unknown(
    box: Sandbox, program: str, version: str, flag_args: list[str], known: bool
) -> None:
    """exec: "--no-eval ... Present in 1.3.6, 1.4.5 and CE 3.11+/4.x" (first releases: 1.1.0
    and CE 3.10.0, tests/support/standin/identity.py); build: "--build-arg and %arguments need
    Apptainer 1.2 or later, or CE 4.0 or later"."""
    done = apptainer(box, *flag_args, program=program, FAKE_APPTAINER_VERSION=version)
    assert ("unknown flag" in done.stderr) is not known, done.stderr
    assert (done.returncode == 1) is not known or "--build-arg" in flag_args


def test_version_banners_and_the_compat_name(box: Sandbox) -> None:
    """Environment, SingularityCE row; environment: "SINGULARITYENV_K also works in
    Apptainer, but every such variable prints an INFO line"."""
    assert apptainer(box, "--version").stdout == "apptainer version 1.4.5\n"
    assert apptainer(box, "--version", program="singularity").stdout == (
        "singularity-ce version 4.5.1\n"
    )
    compat = {"FAKE_APPTAINER_COMPAT": "1", "FAKE_APPTAINER_VERSION": "1.3.6"}
    assert apptainer(box, "--version", program="singularity", **compat).stdout == (
        "apptainer version 1.3.6\n"
    )
    both = {"APPTAINERENV_A": "a", "SINGULARITYENV_B": "b", "SINGULARITYENV_C": "c"}
    done = apptainer(box, "exec", "img.sif", "true", program="singularity", **compat, **both)
    assert done.returncode == 0, done.stderr
    assert (container_env(box)["A"], container_env(box)["B"]) == ("a", "b")
    assert done.stderr.count("INFO:") == 2 and "SINGULARITYENV_C is set" in done.stderr
    ce = apptainer(box, "exec", "img.sif", "true", program="singularity", **both)
    assert "A" not in container_env(box) and container_env(box)["B"] == "b"
    assert "INFO:" not in ce.stderr


def test_the_exit_status_is_the_commands_and_a_signal_kills_it_too(box: Sandbox) -> None:
    """exec: "exit status: the contained command's status. If it died from signal N,
    Apptainer exits 128+N" (the facts file); the real 1.4.5 dies of signal N itself, as the
    stand-in now does (test_standin_differential.py)."""
    assert apptainer(box, "exec", "img.sif", "sh", "-c", "exit 7").returncode == 7
    killed = apptainer(box, "exec", "img.sif", "sh", "-c", "kill -TERM $$")
    assert killed.returncode == -signal.SIGTERM


def test_signals_are_forwarded_to_the_command(box: Sandbox) -> None:
    """exec: "signals: forwarded to the container process when there is no controlling
    terminal"."""
    ready = box.root / "ready"
    script = f'trap "exit 42" TERM; touch {ready}; while :; do sleep 0.05; done'
    proc = subprocess.Popen(
        [str(box.bin / "apptainer"), "exec", "img.sif", "sh", "-c", script],
        env=box.env,
        cwd=box.root,
        start_new_session=True,
    )
    try:
        wait_for(ready.exists, "the command to start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 42
    finally:
        proc.kill()


def values_through(box: Sandbox, *flags: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """exec a command that writes $V, byte for byte, to ./out."""
    return apptainer(box, "exec", *flags, "img.sif", "sh", "-c", 'printf %s "$V" > out', **extra)


def test_injected_values_are_shell_evaluated(box: Sandbox) -> None:
    """Environment: APPTAINERENV_K "is shell-evaluated: it is put in double quotes with only
    `"` escaped, so `$`, backticks and `\\` are interpreted, and a trailing `\\` breaks the
    script"; --env values likewise (exec: --no-eval row). The broken script, as the real 1.4.5
    shows it: every injected variable is lost, an error is printed, the command still runs."""
    assert values_through(box, "-e", APPTAINERENV_V=WEIRD).returncode == 0
    expected = WEIRD.replace("$HOME", str(box.home)).replace("`echo hi`", "hi")
    assert (box.root / "out").read_text() == expected
    assert values_through(box, "-e", "--env", "V=$HOME").returncode == 0
    assert (box.root / "out").read_text() == str(box.home)
    broken = values_through(box, "-e", APPTAINERENV_V=WEIRD + "\\", APPTAINERENV_W="w")
    assert broken.returncode == 0 and "reached EOF without closing quote" in broken.stderr
    assert not {"V", "W"} & set(container_env(box))


def test_no_eval_passes_values_verbatim(box: Sandbox) -> None:
    """exec: "--no-eval: inject APPTAINERENV_/--env values verbatim (single-quoted)";
    APPTAINER_NO_EVAL is the same (Environment: APPTAINER_NO_EVAL row)."""
    for value in (WEIRD, WEIRD + "\\", "it's"):
        assert values_through(box, "-e", "--no-eval", APPTAINERENV_V=value).returncode == 0
        assert (box.root / "out").read_text() == value
    assert values_through(box, "-e", APPTAINER_NO_EVAL="1", APPTAINERENV_V=WEIRD).returncode == 0
    assert (box.root / "out").read_text() == WEIRD


def test_cleanenv_keeps_term_and_proxies_and_sets_lang_c(box: Sandbox) -> None:
    """Environment, "with --cleanenv": only TERM and the proxies pass; LANG=C (overridable
    through APPTAINERENV_LANG), HOME; USER, TMPDIR, LOGNAME dropped; HOME refused."""
    host = {"USER": "me", "TMPDIR": "/tmp", "LOGNAME": "me", "https_proxy": "http://p:1"}
    done = apptainer(
        box, "exec", "--cleanenv", "img.sif", "true", **host, APPTAINERENV_HOME="/elsewhere"
    )
    assert done.returncode == 0, done.stderr
    env = container_env(box)
    assert env["TERM"] == "xterm" and env["https_proxy"] == "http://p:1" and env["LANG"] == "C"
    assert not {"USER", "TMPDIR", "LOGNAME", "FAKE_APPTAINER_LOG"} & set(env)
    assert env["HOME"] == str(box.home) and "APPTAINERENV_HOME is not permitted" in done.stderr
    assert apptainer(box, "exec", "-e", "img.sif", "true", APPTAINERENV_LANG="C.UTF-8")
    assert container_env(box)["LANG"] == "C.UTF-8"


def test_without_cleanenv_the_host_passes_but_not_path_home_or_own_variables(
    box: Sandbox,
) -> None:
    """Environment, "without --cleanenv": everything except HOME, PATH, LD_LIBRARY_PATH and
    APPTAINER_* / SINGULARITY_* is passed."""
    extra = {"USER": "me", "APPTAINER_BIND": "/tmp", "LD_LIBRARY_PATH": "/host/lib"}
    assert apptainer(box, "exec", "img.sif", "true", **extra).returncode == 0
    env = container_env(box)
    assert env["USER"] == "me" and env["PATH"] == IMAGE_PATH
    assert "APPTAINER_BIND" not in env and env["LD_LIBRARY_PATH"] == "/.singularity.d/libs"


def test_the_image_environment_and_what_overrides_it(box: Sandbox) -> None:
    """Environment: APPTAINERENV_K "overrides the image's %environment"; _PATH /
    _PREPEND_PATH / _APPEND_PATH; LD_LIBRARY_PATH gets `:/.singularity.d/libs`. The OCI Env
    order (PATH always the image's, other variables only where unset) is Apptainer's
    10-docker2singularity.sh (internal/pkg/build/sources/conveyorPacker_oci.go)."""
    done = apptainer(
        box, "exec", "img.sif", "true", FROM_IMAGE="host", APPTAINERENV_PREPEND_PATH="/pre"
    )
    assert done.returncode == 0, done.stderr
    env = container_env(box)
    assert env["PATH"] == "/pre:" + IMAGE_PATH and env["FROM_IMAGE"] == "host"
    assert env["APPTAINER_CONTAINER"] == "img.sif" and env["LANG"] == "C.UTF-8"
    extra = {"APPTAINERENV_FROM_IMAGE": "injected", "APPTAINERENV_APPEND_PATH": "/post"}
    extra["APPTAINERENV_LD_LIBRARY_PATH"] = "/lib1"
    assert apptainer(box, "exec", "-e", "img.sif", "true", **extra).returncode == 0
    env = container_env(box)
    assert env["FROM_IMAGE"] == "injected" and env["PATH"] == IMAGE_PATH + ":/post"
    assert env["LD_LIBRARY_PATH"] == "/lib1:/.singularity.d/libs" and env["LANG"] == "C"
    assert apptainer(box, "exec", "img.sif", "true", APPTAINERENV_PATH="/only").returncode == 255
    assert "executable file not found" in apptainer(box, "exec", "img.sif", "x").stderr


def test_env_flag_follows_the_map_flag_rules_and_wins(box: Sandbox) -> None:
    """exec: "--env is a map flag: commas split pairs, so --env A=1,B=2 sets two variables"
    ... "--env wins over --env-file. --env-file is repeatable in 1.4 and single in 1.3" (a
    single pair keeps its commas: pflag's map flag)."""
    done = apptainer(box, "exec", "--env", "A=1,B=2", "img.sif", "true", APPTAINERENV_A="0")
    assert done.returncode == 0, done.stderr
    assert (container_env(box)["A"], container_env(box)["B"]) == ("1", "2")
    assert apptainer(box, "exec", "--env", "A=1,2", "img.sif", "true").returncode == 0
    assert container_env(box)["A"] == "1,2"
    (box.root / "vars").write_text('C="$HOME/x"\nA=from-file\n')
    args = ["exec", "--env-file", "vars", "--env", "A=flag", "img.sif", "true"]
    assert apptainer(box, *args).returncode == 0
    assert (container_env(box)["A"], container_env(box)["C"]) == ("flag", f"{box.home}/x")
    twice = ["exec", "--env-file", "vars", "--env-file", "vars", "img.sif", "true"]
    assert apptainer(box, *twice).returncode == 0
    assert apptainer(box, *twice, FAKE_APPTAINER_VERSION="1.3.6").returncode == 255


def test_working_directory_rules(box: Sandbox) -> None:
    """exec: "--cwd PATH: When set, a failed chdir is fatal. Without it, Apptainer uses the
    host cwd ... and, if that fails, falls back to $HOME with a warning"."""
    (box.root / "sub").mkdir()
    done = apptainer(box, "exec", "--cwd", str(box.root / "sub"), "img.sif", "pwd")
    assert done.stdout.strip() == str(box.root / "sub")
    assert apptainer(box, "exec", "img.sif", "pwd").stdout.strip() == str(box.root)
    assert apptainer(box, "exec", "--pwd", "/no/such", "img.sif", "pwd").returncode == 255
    gone = box.root / "gone"
    gone.mkdir()
    script = (
        f"cd {gone} && rmdir {gone} && exec {box.bin / 'apptainer'} exec {box.root}/img.sif pwd"
    )
    moved = subprocess.run(
        ["sh", "-c", script], env=box.env, capture_output=True, text=True, timeout=60
    )
    assert moved.stdout.strip() == str(box.home) and "WARNING" in moved.stderr, moved.stderr


def test_binds_comma_lists_relative_sources_and_missing_sources(box: Sandbox) -> None:
    """exec: -B "src[:dst[:opts]], and one value may hold a comma list ... A relative src is
    made absolute against the cwd ... A missing src is an error"; APPTAINER_BIND appends."""
    (box.root / "data").mkdir()
    done = apptainer(
        box, "exec", "-B", "data:data:rw,/tmp", "--bind=/tmp:/tmp", "img.sif", "true",
        APPTAINER_BIND="/usr",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert container(box)["binds"] == [
        {"src": str(box.root / "data"), "dst": "data", "readonly": False},
        {"src": "/tmp", "dst": "/tmp", "readonly": False},
        {"src": "/tmp", "dst": "/tmp", "readonly": False},
        {"src": "/usr", "dst": "/usr", "readonly": False},
    ]
    missing = apptainer(box, "exec", "-B", "/no/such/dir:/x", "img.sif", "true")
    assert missing.returncode == 255 and "/no/such/dir" in missing.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="real bind mounts need root")
def test_binds_the_host_cannot_see_are_real_mounts(box: Sandbox) -> None:
    """exec: -B "If dst is missing, it equals src ... opts are ro, rw": a destination that
    differs, or :ro, is mounted for real in a private mount namespace. A destination the host
    lacks is made there as Apptainer's underlay makes it in an image, and is gone after."""
    (box.root / "data").mkdir()
    (box.root / "data" / "f").write_text("content")
    (box.root / "mnt").mkdir()
    script = 'cat mnt/f; touch mnt/g 2>/dev/null && echo " writable" || echo " read-only"'
    done = apptainer(box, "exec", "-B", f"{box.root}/data:{box.root}/mnt:ro", "img.sif",
                     "sh", "-c", script)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "content read-only\n" and not (box.root / "mnt" / "f").exists()
    made = apptainer(box, "exec", "-B", f"{box.root}/data:/opt/no/such/dst:ro", "img.sif",
                     "cat", "/opt/no/such/dst/f")  # fmt: skip
    assert made.returncode == 0 and made.stdout == "content", made.stderr
    assert not Path("/opt/no").exists()
    nowhere = apptainer(box, "exec", "-B", f"{box.root}/data:/no/such/dst", "img.sif", "true")
    assert nowhere.returncode == 255 and "/no/such/dst" in nowhere.stderr
    assert not Path("/no").exists()


def test_run_and_shell(box: Sandbox) -> None:
    """exec: "run IMAGE [ARGS] and shell IMAGE need at least 1; shell ignores extra arguments
    and prints a warning" (run with arguments runs them: no ENTRYPOINT in this image)."""
    assert apptainer(box, "run", "img.sif", "sh", "-c", "exit 3").returncode == 3
    done = subprocess.run(
        [str(box.bin / "apptainer"), "shell", "img.sif", "extra"],
        env=box.env, cwd=box.root, input="echo in-shell\n", capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.stdout == "in-shell\n" and "WARNING" in done.stderr


def test_apptainer_and_singularity_settings_that_differ_warn(box: Sandbox) -> None:
    """parsing: "APPTAINER_<KEY> (SINGULARITY_<KEY> is accepted as a fallback; if both are set
    to the same value, nothing is printed; if they differ, you get a warning)"."""
    same = {"APPTAINER_CACHEDIR": "/c", "SINGULARITY_CACHEDIR": "/c"}
    assert "WARNING" not in apptainer(box, "exec", "img.sif", "true", **same).stderr
    differ = {**same, "SINGULARITY_CACHEDIR": "/d"}
    assert (
        "APPTAINER_CACHEDIR and SINGULARITY_CACHEDIR"
        in apptainer(box, "--version", **differ).stderr
    )
    assert "WARNING" not in apptainer(box, "--version", program="singularity", **differ).stderr


def test_every_call_is_logged_with_the_programs_own_variables(box: Sandbox) -> None:
    """The log (contract): argv, pid, host and the APPTAINER*/SINGULARITY* variables."""
    apptainer(box, "inspect", "img.sif", APPTAINER_CACHEDIR="/c", OTHER="x")
    (line,) = (box.root / "calls.jsonl").read_text().splitlines()
    logged = json.loads(line)
    assert logged["argv"] == ["inspect", "img.sif"] and logged["host"] == os.uname().nodename
    assert logged["env"] == {"APPTAINER_CACHEDIR": "/c"}
