"""Apptainer's release decides how variables travel; what reaches the container is on purpose.

Facts from /work/shared/apptainer-facts.md and the projects' CHANGELOG.md (--no-eval first in
Apptainer 1.1.0 and SingularityCE 3.10.0).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.container.runtimes import Invocation, Request, describe, plan_invocation
from ctrain.errors import ExternalToolError, SpecError
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.plan import LaunchOptions, child_environ, make_plan
from ctrain.references import is_remote, runtime_reference
from ctrain.releases import RuntimeVersion, needs, parse_version


def which(name: str) -> str:
    return f"/usr/bin/{name}"


def released(text: str) -> object:
    return lambda program: parse_version(text, program)


def plan(
    tmp_path: Path,
    version: str = "apptainer version 1.4.5",
    runtime: str = "apptainer",
    environ: dict[str, str] | None = None,
    **fields: object,
) -> Invocation:
    image = tmp_path / "img.sif"
    image.write_bytes(b"")
    values: dict[str, object] = {"image": str(image), "command": ("true",), "launch": False}
    values.update(fields)
    request = Request(runtime, "exec", **values)  # type: ignore[arg-type]
    return plan_invocation(request, environ or {}, which, None, version_of=released(version))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("output", "flavour", "number"),
    [
        ("apptainer version 1.4.5\n", "apptainer", (1, 4, 5)),
        ("apptainer version 1.3.6-1.el9\n", "apptainer", (1, 3, 6)),
        ("apptainer version 1.0.0-rc.2\n", "apptainer", (1, 0, 0)),
        ("singularity-ce version 4.5.1\n", "singularity-ce", (4, 5, 1)),
        ("singularity-ce version 3.9.9-jammy\n", "singularity-ce", (3, 9, 9)),
        ("singularity version 3.8.7\n", "singularity", (3, 8, 7)),
        ("WARNING: something\napptainer version 1.2.5\n", "apptainer", (1, 2, 5)),
    ],
)
def test_version_output_is_parsed(output: str, flavour: str, number: tuple[int, ...]) -> None:
    got = parse_version(output, "apptainer")
    assert (got.flavour, got.number, got.text) == (flavour, number, output.splitlines()[-1])


def test_an_unreadable_version_is_one_error_with_the_fix() -> None:
    with pytest.raises(ExternalToolError, match="cannot tell which release") as caught:
        parse_version("2.6.1-dist\n", "singularity")
    assert "Apptainer >= 1.1 or SingularityCE >= 3.10" in caught.value.fix


@pytest.mark.parametrize(
    ("text", "has"),
    [
        ("apptainer version 1.0.3", False),
        ("apptainer version 1.1.0", True),
        ("apptainer version 1.4.5", True),
        ("singularity-ce version 3.9.9", False),
        ("singularity-ce version 3.10.0", True),
        ("singularity-ce version 4.5.1", True),
        ("singularity version 3.8.7", False),
    ],
)
def test_no_eval_from_its_first_release(text: str, has: bool, tmp_path: Path) -> None:
    version: RuntimeVersion = parse_version(text, "apptainer")
    assert version.has("--no-eval") is has
    argv = plan(tmp_path, text, env_pairs=("A=1",)).argv
    assert ("--no-eval" in argv) is has
    assert argv.index("--cleanenv") == 2


@pytest.mark.parametrize(
    ("text", "has"),
    [
        ("apptainer version 1.1.9", False),
        ("apptainer version 1.2.0", True),
        ("singularity-ce version 3.11.5", False),
        ("singularity-ce version 4.0.0", True),
        ("singularity version 3.8.7", False),
    ],
)
def test_build_arg_from_its_first_release(text: str, has: bool) -> None:
    assert parse_version(text, "apptainer").has("--build-arg") is has


UNSAFE = ["$HOME", "`id`", "a\\b", "ends\\"]


@pytest.mark.parametrize("value", UNSAFE)
def test_without_no_eval_evaluated_values_are_refused(value: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="would be shell-evaluated") as caught:
        plan(tmp_path, "apptainer version 1.0.3", env_pairs=(f"V={value}",))
    assert "Apptainer >= 1.1" in caught.value.fix


def test_the_refusal_does_not_print_a_secret(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        plan(tmp_path, "apptainer version 1.0.3", env_pairs=("HF_TOKEN=hf_$ecret",))
    assert caught.value.message.startswith("HF_TOKEN='<hidden>' would be shell-evaluated")
    assert "ecret" not in caught.value.line()


@pytest.mark.parametrize("value", [*UNSAFE, "two\nlines", "quote\"d 'x'", "a,b c"])
def test_with_no_eval_every_value_is_handed_over_as_given(value: str, tmp_path: Path) -> None:
    got = plan(tmp_path, env_pairs=(f"V={value}",))
    assert got.env["APPTAINERENV_V"] == value


def test_plain_values_pass_without_no_eval(tmp_path: Path) -> None:
    got = plan(tmp_path, "singularity version 3.8.7", "singularity", env_pairs=("V=a b\nc'd\"",))
    assert got.env["SINGULARITYENV_V"] == "a b\nc'd\""
    assert "--no-eval" not in got.argv


@pytest.mark.parametrize(
    ("version", "prefix"),
    [
        ("apptainer version 1.4.5", "APPTAINERENV_"),  # Apptainer's compatibility singularity
        ("singularity-ce version 4.5.1", "SINGULARITYENV_"),
    ],
)
def test_singularity_prefix_follows_what_it_really_is(
    version: str, prefix: str, tmp_path: Path
) -> None:
    got = plan(tmp_path, version, "singularity", env_pairs=("V=1",))
    assert got.env[prefix + "V"] == "1"
    assert not any(key.endswith("ENV_V") and not key.startswith(prefix) for key in got.env)


def test_docker_daemon_references_take_apptainers_exec_form(tmp_path: Path) -> None:
    for given in ("docker-daemon://ctrain:0.1.0", "docker-daemon:ctrain:0.1.0"):
        assert is_remote(given, "exec") and is_remote(given, "pull")
        got = plan(tmp_path, image=given)
        assert got.argv[-2:] == ["docker-daemon:ctrain:0.1.0", "true"]
    shown = describe(plan(tmp_path, image="docker-daemon://ctrain:0.1.0"), {})
    assert any("given as docker-daemon:ctrain:0.1.0" in line for line in shown)
    assert runtime_reference("docker-daemon://ctrain:0.1.0", "build") == (
        "docker-daemon://ctrain:0.1.0"
    )
    assert not is_remote("docker-daemonx:ctrain", "exec")


def test_the_working_directory_is_left_to_apptainer_unless_asked(tmp_path: Path) -> None:
    assert not {"--pwd", "--cwd"} & set(plan(tmp_path, cwd="/work").argv)
    argv = plan(tmp_path, cwd="/work", workdir="/data").argv
    assert argv[argv.index("--cwd") + 1] == "/data"


def test_host_runtime_refuses_cwd(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="--cwd needs a container"):
        plan(tmp_path, runtime="host", workdir="/data")


def test_tmpdir_user_logname_reach_the_container_lang_does_not(tmp_path: Path) -> None:
    job_tmp = tmp_path / "slurm-42"
    job_tmp.mkdir()
    host = {"TMPDIR": str(job_tmp), "USER": "u", "LOGNAME": "u", "LANG": "de_DE.UTF-8"}
    got = plan(tmp_path, environ=host)
    assert got.added["TMPDIR"] == str(job_tmp)
    assert got.argv[got.argv.index("--bind") + 1] == f"{job_tmp}:{job_tmp}:rw"
    assert got.added["USER"] == got.added["LOGNAME"] == "u"
    assert "LANG" not in got.added
    asked = plan(tmp_path, environ=host, env_pairs=("LANG=en_US.UTF-8",))
    assert asked.added["LANG"] == "en_US.UTF-8"


@pytest.mark.parametrize("tmpdir", ["gone", "/tmp", "/tmp/", "relative"])
def test_a_missing_or_plain_tmpdir_is_neither_bound_nor_set(tmp_path: Path, tmpdir: str) -> None:
    (tmp_path / "relative").mkdir()
    given = str(tmp_path / tmpdir) if tmpdir == "gone" else tmpdir
    got = plan(tmp_path, environ={"TMPDIR": given})
    assert "TMPDIR" not in got.added and "--bind" not in got.argv


def test_tmpdir_bound_for_docker_too(tmp_path: Path) -> None:
    got = plan(tmp_path, runtime="docker", environ={"TMPDIR": str(tmp_path)})
    assert f"type=bind,source={tmp_path},target={tmp_path}" in got.argv
    assert "TMPDIR" in got.argv[got.argv.index("-e") + 1 :]


def test_a_host_cuda_home_does_not_become_the_containers_xla_flags(tmp_path: Path) -> None:
    host = {"CUDA_HOME": "/opt/cuda-12", "CUDA_PATH": "/opt/cuda-12", "CUDA_CACHE_DISABLE": "1"}
    got = plan(tmp_path, environ=host)
    assert "CUDA_HOME" not in got.added and "CUDA_PATH" not in got.added
    assert got.added["CUDA_CACHE_DISABLE"] == "1"  # the rest of CUDA_ still passes
    for image_env in ({}, {"CUDA_HOME": "/usr/local/cuda"}):  # what ctrain launch sees inside
        inside = {**image_env, **got.added}
        launched = make_plan(JobEnv.from_environ(inside, "x"), LaunchOptions(), inside, ())
        xla = child_environ(inside, launched).get("XLA_FLAGS", "")
        assert "/opt/cuda-12" not in xla
        assert ("/usr/local/cuda" in xla) is bool(image_env)


def test_dry_run_lines_show_every_variable_the_runtime_process_gets(tmp_path: Path) -> None:
    host = {"PATH": "/usr/bin", "SLURM_JOB_ID": "7"}
    got = plan(tmp_path, environ=host, env_pairs=("A=$x",))
    extra = Invocation(
        got.runtime, got.argv, {**got.env, "APPTAINER_CACHEDIR": "/c"}, got.added, got.spec,
        notes=got.notes, carriers=got.carriers,
    )  # fmt: skip
    lines = describe(extra, host)
    assert lines[1] == (
        "  note apptainer version 1.4.5: container variables as APPTAINERENV_NAME, "
        "values verbatim (--no-eval)"
    )
    assert "  env A='$x'" in lines and "  env SLURM_JOB_ID=7" in lines
    assert "  runtime env APPTAINER_CACHEDIR=/c" in lines
    assert not any("APPTAINERENV_" in line for line in lines[2:])
    assert len(lines) == 2 + len(got.added) + 1


def test_dry_run_hides_secrets_unless_revealed(tmp_path: Path) -> None:
    host = {"PATH": "/usr/bin"}
    pairs = ("HF_TOKEN=hf_abc", "HTTPS_PROXY=http://u:pw@proxy:3128")
    got = plan(tmp_path, environ=host, env_pairs=pairs)
    extra = Invocation(
        got.runtime, got.argv, {**got.env, "APPTAINER_DOCKER_PASSWORD": "s3cret"}, got.added,
        got.spec, notes=got.notes, carriers=got.carriers,
    )  # fmt: skip
    head = [
        f"/usr/bin/apptainer exec --cleanenv --no-eval {tmp_path / 'img.sif'} true",
        "  note apptainer version 1.4.5: container variables as APPTAINERENV_NAME, "
        "values verbatim (--no-eval)",
    ]
    assert describe(extra, host) == [
        *head,
        "  env HF_TOKEN='<hidden>'",
        "  env HTTPS_PROXY='http://u:<hidden>@proxy:3128'",
        "  env PYTHONNOUSERSITE=1",
        "  runtime env APPTAINER_DOCKER_PASSWORD='<hidden>'",
    ]
    assert describe(extra, host, reveal=True) == [
        *head,
        "  env HF_TOKEN=hf_abc",
        "  env HTTPS_PROXY=http://u:pw@proxy:3128",
        "  env PYTHONNOUSERSITE=1",
        "  runtime env APPTAINER_DOCKER_PASSWORD=s3cret",
    ]


def test_needs_names_the_first_releases_of_a_feature() -> None:
    assert needs("--build-arg") == "Apptainer >= 1.2 or SingularityCE >= 4.0"
