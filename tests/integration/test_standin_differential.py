"""The Apptainer stand-in (tests/support/fake_apptainer.py) against the real Apptainer on what
ctrain's unit tests lean on it for: pull, build and overlay create (the same exit status and the
same files left), and exec and run beyond ctrain's own argvs (test_golden_oracles.py has those): the
environment (evaluated and verbatim, --cleanenv, --env-file, PATH edits, HOME, the legacy
SINGULARITYENV_ prefix), exit statuses and signals, --cwd, binds, overlay locks, the runscript,
labels (the same exit status and output, and what each says on stderr where the case names it).
Each case runs the same command line through both, each in a directory of its own.

The stand-in stays for what the real binary cannot show here (SingularityCE, other Apptainer
releases, a version without --no-eval); where the two differ, the real one is right and the
stand-in is corrected.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fake_apptainer
from tests.support.helpers import REGISTRY, need, registry_up
from tests.support.images import busybox_base

pytestmark = [pytest.mark.apptainer, pytest.mark.docker, pytest.mark.timeout(600)]
TIMEOUT = 120
DEF = """Bootstrap: localimage
From: BASE

%arguments
    WHO=default

%labels
    ctrain.test.who {{ WHO }}
"""

# name: (argv with {dir} and {ref} filled in, the files in {dir} after it)
CASES: dict[str, tuple[str, str]] = {
    "pull over plain http without --no-https": ("pull --disable-cache {dir}/a.sif {ref}", ""),
    "pull --no-https": ("pull --disable-cache --no-https {dir}/a.sif {ref}", "a.sif"),
    "pull onto an existing file": ("pull --disable-cache --no-https {dir}/a.sif {ref}", "a.sif"),
    "pull --force": ("pull --disable-cache --no-https --force {dir}/a.sif {ref}", "a.sif"),
    "pull docker-daemon://": ("pull --disable-cache {dir}/d.sif docker-daemon://x:1", "a.sif"),
    "pull with three arguments": ("pull {dir}/e.sif {ref} extra", "a.sif"),
    "pull with an unknown flag": ("pull --bogus {dir}/e.sif {ref}", "a.sif"),
    "build from a definition": ("build --build-arg WHO=me {dir}/b.sif {dir}/t.def", "a.sif b.sif"),
    "build with an unused build arg": (
        "build --force --build-arg WHO=me --build-arg OTHER=1 {dir}/b.sif {dir}/t.def",
        "a.sif b.sif",
    ),
    "build onto an existing file": ("build {dir}/b.sif {dir}/t.def", "a.sif b.sif"),
    "build with one argument": ("build {dir}/t.def", "a.sif b.sif"),
    "overlay create": ("overlay create --size 64 {dir}/o.img", "a.sif b.sif o.img"),
    "overlay create onto an existing file": (
        "overlay create --size 64 {dir}/o.img",
        "a.sif b.sif o.img",
    ),
    "overlay create with a unit": ("overlay create --size 64M {dir}/p.img", "a.sif b.sif o.img"),
    "overlay create too small": ("overlay create --size 32 {dir}/q.img", "a.sif b.sif o.img"),
}


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, str]]:
    """(the real binary's directory, the stand-in's, busybox's reference in the local
    registry); the cases run in order, each on what the ones before left."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    ref = f"{REGISTRY}/ctrain-test/standin-busybox:{os.getpid()}-{time.monotonic_ns()}"
    for argv in (["docker", "tag", busybox_base(), ref], ["docker", "push", ref]):
        subprocess.run(argv, capture_output=True, timeout=TIMEOUT, check=True)
    root = tmp_path_factory.mktemp("differential")
    real, standin = root / "real", root / "standin"
    for directory in (real, standin):
        directory.mkdir()
        (directory / "t.def").write_text(DEF.replace("BASE", str(directory / "a.sif")))
    fake_apptainer.install(root / "bin")
    yield real, standin, f"docker://{ref}"


def outcome(program: str, line: str, directory: Path, ref: str) -> tuple[int, list[str], str]:
    argv = [program, *line.format(dir=directory, ref=ref).split()]
    env = {**os.environ, "APPTAINER_CACHEDIR": str(directory.parent / "cache")}
    done = subprocess.run(
        argv, env=env, cwd=directory, capture_output=True, text=True, timeout=TIMEOUT
    )
    return done.returncode, sorted(p.name for p in directory.iterdir()), done.stderr


def standin(directory: Path) -> str:
    return str(directory.parent / "bin" / "apptainer")


@pytest.mark.parametrize("case", list(CASES))
def test_the_standin_does_what_apptainer_does(case: str, dirs: tuple[Path, Path, str]) -> None:
    real_dir, standin_dir, ref = dirs
    line, left = CASES[case]
    real = outcome("apptainer", line, real_dir, ref)
    fake = outcome(standin(standin_dir), line, standin_dir, ref)
    assert real[1] == sorted([*left.split(), "t.def"]), real[2]
    assert fake[:2] == real[:2], f"real: {real[2]}\nstand-in: {fake[2]}"


# The commands run in the busybox image's SIF (real) and on the host (the stand-in): each is a
# shell builtin, the same in busybox's sh and the host's dash. name: (argv, with {sif} and
# {dir}; the variables it gets on top of the test's; a line both must print on stderr)
WEIRD = '$HOME `echo hi` "q" it\'s'
EXEC_CASES: dict[str, tuple[str, dict[str, str], str]] = {
    "the command's exit status": ("exec {sif} sh -c 'exit 7'", {}, ""),
    "killed by a signal": ("exec {sif} sh -c 'kill -TERM $$'", {}, ""),
    "no such command": ("exec {sif} no-such-command", {}, "executable file not found"),
    "values verbatim with --no-eval": (
        "exec --no-eval {sif} sh -c 'printf %s \"$A\"'",
        {"APPTAINERENV_A": WEIRD + "\\"},
        "",
    ),
    "values evaluated without --no-eval": (
        "exec {sif} sh -c 'printf %s \"$A\"'",
        {"APPTAINERENV_A": "$HOME:${NOPE:-unset}"},
        "",
    ),
    "--env values evaluated too": ("exec --env A=$HOME {sif} sh -c 'printf %s \"$A\"'", {}, ""),
    "a trailing backslash empties every injected variable": (
        "exec {sif} sh -c 'printf %s \"$A|$B\"'",
        {"APPTAINERENV_A": "x\\", "APPTAINERENV_B": "y"},
        "reached EOF without closing quote",
    ),
    "--env wins over APPTAINERENV_": (
        "exec --env A=1 {sif} sh -c 'printf %s \"$A\"'",
        {"APPTAINERENV_A": "2"},
        "",
    ),
    "--cleanenv keeps TERM and the proxies, sets LANG=C": (
        "exec --cleanenv {sif} sh -c 'printf %s \"$FOO|$http_proxy|$TERM|$LANG\"'",
        {"FOO": "1", "http_proxy": "http://p:3128", "TERM": "dumb", "LANG": "C.UTF-8"},
        "",
    ),
    "the host's variables pass without --cleanenv": (
        "exec {sif} sh -c 'printf %s \"$FOO|$LANG\"'",
        {"FOO": "1", "LANG": "C.UTF-8"},
        "",
    ),
    "--env-file is sourced": (
        "exec --env-file {dir}/e.env {sif} sh -c 'printf %s \"$B|$C\"'",
        {},
        "",
    ),
    "PATH: the image's, prepended and appended": (
        "exec {sif} sh -c 'printf %s \"$PATH\"'",
        {"APPTAINERENV_PREPEND_PATH": "/p", "APPTAINERENV_APPEND_PATH": "/q"},
        "",
    ),
    "HOME cannot be injected": (
        "exec {sif} sh -c 'printf %s \"$HOME\"'",
        {"APPTAINERENV_HOME": "/elsewhere"},
        "Overriding HOME environment variable with APPTAINERENV_HOME is not permitted",
    ),
    "SINGULARITYENV_ alone": (
        "exec {sif} sh -c 'printf %s \"$S\"'",
        {"SINGULARITYENV_S": "1"},
        "INFO:    Environment variable SINGULARITYENV_S is set, but APPTAINERENV_S is preferred",
    ),
    "SINGULARITYENV_ beside a different APPTAINERENV_": (
        "exec {sif} sh -c 'printf %s \"$S\"'",
        {"SINGULARITYENV_S": "1", "APPTAINERENV_S": "2"},
        "WARNING: SINGULARITYENV_S and APPTAINERENV_S have different values, using the latter",
    ),
    "--cwd": ("exec --cwd /tmp {sif} sh -c pwd", {}, ""),
    "--cwd missing": ("exec --cwd /no/such/dir {sif} sh -c pwd", {}, ""),
    "a bind whose source is missing": ("exec --bind /no/such/dir:/mnt {sif} sh -c :", {}, ""),
    "a :ro bind": (
        "exec --bind {dir}:/mnt:ro {sif} sh -c 'echo x 2>/dev/null >/mnt/w || echo refused'",
        {},
        "",
    ),
    "a writable bind": (
        "exec --bind {dir}:/mnt {sif} sh -c 'echo x >/mnt/w && echo wrote'",
        {},
        "",
    ),
    "an overlay read-only": ("exec --overlay {dir}/o.img:ro {sif} sh -c 'echo ok'", {}, ""),
    "an overlay writable": ("exec --overlay {dir}/o.img {sif} sh -c 'echo ok'", {}, ""),
    "run with arguments replaces the image's CMD": ("run {sif} sh -c 'echo ran'", {}, ""),
    "run without arguments runs CMD (sh, on no input)": ("run {sif}", {}, ""),
}


@pytest.fixture(scope="module")
def images(dirs: tuple[Path, Path, str]) -> tuple[Path, Path]:
    """(real, stand-in) directories beside the pull/build cases' ones, each with x.sif pulled
    by its own program, o.img made by it, an --env-file e.env and a definition from x.sif."""
    real_dir, standin_dir, ref = dirs
    made = real_dir.parent / "real-exec", standin_dir.parent / "standin-exec"
    for program, directory in zip(("apptainer", standin(standin_dir)), made, strict=True):
        directory.mkdir()
        (directory / "e.env").write_text('B=2\nC="$B-x"\n')
        (directory / "t.def").write_text(DEF.replace("BASE", str(directory / "x.sif")))
        for line in (
            "pull --disable-cache --no-https {dir}/x.sif {ref}",
            "overlay create --size 64 {dir}/o.img",
        ):
            status, _, said = outcome(program, line, directory, ref)
            assert status == 0, said
    return made


def ran(program: str, line: str, directory: Path, extra: dict[str, str]) -> tuple[int, str, str]:
    """``program LINE`` ({sif} and {dir} filled in) with the test's environment, less any
    container variables of its own, plus ``extra``: (status, stdout, stderr)."""
    argv = [program, *shlex.split(line.format(sif=directory / "x.sif", dir=directory))]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("APPTAINERENV_", "SINGULARITYENV_"))
    }
    env |= {"APPTAINER_CACHEDIR": str(directory.parent / "cache"), **extra}
    done = subprocess.run(
        argv,
        env=env,
        cwd=directory,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("case", list(EXEC_CASES))
def test_the_standin_runs_commands_as_apptainer_does(case: str, images: tuple[Path, Path]) -> None:
    real_dir, standin_dir = images
    line, extra, said = EXEC_CASES[case]
    real = ran("apptainer", line, real_dir, extra)
    fake = ran(standin(standin_dir), line, standin_dir, extra)
    assert fake[:2] == (real[0], real[1].replace(str(real_dir), str(standin_dir))), (
        f"real: {real[2]}\nstand-in: {fake[2]}"
    )
    assert said in real[2] and said in fake[2], f"real: {real[2]}\nstand-in: {fake[2]}"


def test_overlay_locks_as_apptainer_does(images: tuple[Path, Path]) -> None:
    """While one writer runs, a second writer and a reader are refused (exit 255), as the real
    binary's fcntl locks on the ext3 image refuse them; once it ends, a writer runs."""
    for program, directory in zip(("apptainer", standin(images[1])), images, strict=True):
        line = "exec --overlay {dir}/o.img {sif} sh -c 'echo held; read -r _'"
        argv = [program, *shlex.split(line.format(sif=directory / "x.sif", dir=directory))]
        holder = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "held\n"
            for mode in ("", ":ro"):
                status, _, said = ran(
                    program, f"exec --overlay {{dir}}/o.img{mode} {{sif}} sh -c :", directory, {}
                )
                assert status == 255 and "currently in use" in said, (program, mode, said)
        finally:
            holder.communicate("\n", timeout=TIMEOUT)
        assert holder.returncode == 0
        assert ran(program, "exec --overlay {dir}/o.img {sif} sh -c :", directory, {})[0] == 0


def test_labels_read_back_as_apptainer_does(images: tuple[Path, Path]) -> None:
    """``inspect --json --labels`` of a SIF built from a definition: its labels, the same in
    both (Apptainer's own org.label-schema.* labels are not modelled by the stand-in)."""
    found = []
    for program, directory in zip(("apptainer", standin(images[1])), images, strict=True):
        line = "build --build-arg WHO=me {dir}/l.sif {dir}/t.def"
        status, _, said = ran(program, line, directory, {})
        assert status == 0, said
        status, out, said = ran(program, "inspect --json --labels {dir}/l.sif", directory, {})
        assert status == 0, said
        labels = json.loads(out)["data"]["attributes"]["labels"]
        found.append({k: v for k, v in labels.items() if not k.startswith("org.label-schema.")})
    assert found[0] == found[1] == {"ctrain.test.who": "me"}
