"""The ch-run adapter: argv, the container's environment, binds checked against the image."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.container.charliecloud import Charliecloud, inside, parse_image_env
from ctrain.container.runtimes import Request, choose_runtime, plan_invocation, runtime_named
from ctrain.container.spec import Bind, Overlay, RunSpec
from ctrain.errors import SpecError
from ctrain.releases import RuntimeVersion

CH = Charliecloud()


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """An image directory as ch-convert writes one: /mnt, /srv, /tmp and ch/environment."""
    root = tmp_path / "img"
    for name in ("mnt", "srv", "tmp", "ch", "usr/lib/x86_64-linux-gnu"):
        (root / name).mkdir(parents=True)
    (root / "ch" / "environment").write_text("PATH=/opt/venv/bin:/usr/bin\nLANG='C.UTF-8'\n")
    return root


def spec(where: Path, **kw: object) -> RunSpec:
    base: dict[str, object] = {"image": str(where), "action": "exec", "command": ("python", "x")}
    base["env"] = {"USER": "u"}  # ch-run needs it; passed through from the host
    return RunSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_argv_binds_workdir_and_the_environment_glob(image: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    s = spec(
        image,
        binds=(Bind(str(data), "/mnt"),),
        cwd=str(data / "sub"),
        env={"SLURM_PROCID": "0", "PYTHONNOUSERSITE": "1", "USER": "u"},
    )
    assert CH.argv(s, "/usr/bin/ch-run") == [
        "/usr/bin/ch-run",
        "-b",
        f"{data}:/mnt",
        "-c",
        "/mnt/sub",  # the host's working directory, where the container sees it
        "--unset-env=!(LANG|PATH|PYTHONNOUSERSITE|SLURM_PROCID|USER)",
        str(image),
        "--",
        "python",
        "x",
    ]


def test_environment_is_the_images_then_the_chosen(image: Path) -> None:
    s = spec(image, env={"PATH": "/asked", "CTRAIN_X": "a b $HOME 'q'\nz", "USER": "u"})
    env = CH.process_env(s, {"USER": "u", "HOME": "/root", "SECRET": "s"})
    assert env["PATH"] == "/asked"  # --env wins over the image's
    assert env["LANG"] == "C.UTF-8"  # the image's, its quotes stripped as ch-run does
    assert env["CTRAIN_X"] == "a b $HOME 'q'\nz"  # verbatim: it never reaches argv
    assert "a b" not in " ".join(CH.argv(s, "ch-run"))  # the name is, the value is not
    assert env["USER"] == "u"  # ch-run itself needs it; --unset-env keeps it from the container


def test_user_must_be_set(image: Path) -> None:
    with pytest.raises(SpecError, match="USER") as caught:
        CH.argv(spec(image, env={"HOME": "/root"}), "ch-run")
    assert "export USER" in caught.value.fix


def test_job_tmpdir_is_chruns_own_tmp_bind(image: Path, tmp_path: Path) -> None:
    job_tmp = str(tmp_path / "job")
    env = {"TMPDIR": job_tmp, "USER": "u"}
    s = spec(image, binds=(Bind(job_tmp, job_tmp),), env=env, cwd=job_tmp + "/w")
    argv = CH.argv(s, "ch-run")
    assert "-b" not in argv  # ch-run binds $TMPDIR at /tmp itself
    assert argv[argv.index("-c") + 1] == "/tmp/w"
    assert "TMPDIR" not in argv[argv.index("-c") + 2]  # ch-run unsets it: not kept either
    assert any("/tmp" in note for note in CH.notes(s))


def test_no_workdir_when_the_container_cannot_see_the_directory(image: Path) -> None:
    s = spec(image, cwd="/home/someone/project")
    assert "-c" not in CH.argv(s, "ch-run")
    assert any("not in the container" in note for note in CH.notes(s))
    assert CH.argv(spec(image, workdir="/srv"), "ch-run")[1:3] == ["-c", "/srv"]


def test_inside() -> None:
    binds = (Bind("/data", "/mnt"), Bind("/data/deep", "/srv"))
    assert inside("/data/deep/x", binds, "/tmp") == "/srv/x"  # the later bind covers it
    assert inside("/data/y", binds, "/tmp") == "/mnt/y"
    assert inside("/var/job/a", binds, "/var/job") == "/tmp/a"
    assert inside("/elsewhere", binds, "/tmp") is None


@pytest.mark.parametrize(
    ("bind", "match", "fix"),
    [
        (Bind("/data", "/data"), "not a directory in the image", "-B /data:/mnt"),
        (Bind("/data", "/mnt", "ro"), "no read-only binds", "-B /data:/mnt"),
        (Bind("/a:b", "/mnt"), "holds ':'", "symlink"),
    ],
)
def test_binds_ch_run_cannot_make_are_refused(
    image: Path, bind: Bind, match: str, fix: str
) -> None:
    with pytest.raises(SpecError, match=match) as caught:
        CH.argv(spec(image, binds=(bind,)), "ch-run")
    assert fix in caught.value.fix


def test_nv_needs_the_driver_ch_fromhost_puts_in_the_image(image: Path) -> None:
    with pytest.raises(SpecError, match="ch-run has no --nv") as caught:
        CH.argv(spec(image, nv=True), "ch-run")
    assert f"ch-fromhost --nvidia {image}" in caught.value.fix
    (image / "usr/lib/x86_64-linux-gnu/libcuda.so.1").write_text("")
    assert CH.argv(spec(image, nv=True), "ch-run")[-4:] == [str(image), "--", "python", "x"]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"overlay": Overlay("/o.img", False)}, "--overlay"),
        ({"action": "run"}, "no runscript"),
        ({"command": ("true",), "image": "/nonexistent/image"}, "not an image directory"),
    ],
)
def test_refusals(image: Path, kw: dict[str, object], match: str) -> None:
    with pytest.raises(SpecError, match=match):
        CH.argv(spec(image, **kw), "ch-run")


def test_shell_runs_bash(image: Path) -> None:
    assert CH.argv(spec(image, action="shell", command=()), "ch-run")[-2:] == ["--", "/bin/bash"]


def test_parse_image_env() -> None:
    text = "A=1\n\nB='two words'\nC=x=y\nnot a pair\nD='\n"
    assert parse_image_env(text) == {"A": "1", "B": "two words", "C": "x=y", "D": "'"}


@pytest.mark.parametrize(
    ("present", "expected"),
    [
        ({"apptainer", "ch-run", "docker"}, "apptainer"),
        ({"ch-run", "docker", "podman"}, "charliecloud"),
        ({"docker"}, "docker"),
    ],
)
def test_auto_tries_charliecloud_after_apptainer_before_docker(
    present: set[str], expected: str
) -> None:
    runtime, program = choose_runtime("auto", lambda n: f"/bin/{n}" if n in present else None)
    assert runtime is runtime_named(expected)
    if expected == "charliecloud":
        assert program == "/bin/ch-run"


def test_plan_invocation_end_to_end(image: Path, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    request = Request(
        runtime="charliecloud",
        action="exec",
        image=str(image),
        command=("python", "train.py"),
        binds=(f"{tmp_path / 'data'}:/mnt",),
        env_pairs=("ASKED=1",),
        cwd=str(tmp_path / "data"),
    )
    environ = {"USER": "u", "PATH": "/usr/bin", "SLURM_PROCID": "1", "SECRET": "x"}
    inv = plan_invocation(
        request,
        environ,
        lambda n: "/usr/bin/ch-run" if n == "ch-run" else None,
        None,
        version_of=lambda p: RuntimeVersion("apptainer", (0, 31, 0), "ch-run 0.31"),
    )
    assert inv.argv[:5] == ["/usr/bin/ch-run", "-b", f"{tmp_path / 'data'}:/mnt", "-c", "/mnt"]
    assert inv.argv[inv.argv.index(str(image)) + 1 :] == [
        "--",
        "ctrain",
        "launch",
        "--",
        "python",
        "train.py",
    ]
    glob = inv.argv[5]
    assert glob == "--unset-env=!(ASKED|LANG|PATH|PYTHONNOUSERSITE|SLURM_PROCID|USER)"
    assert inv.env["SECRET"] == "x"  # in ch-run's environment, removed by the glob
    assert inv.added["ASKED"] == "1"


def test_a_pmix_step_uses_pmix_hash_store(image: Path) -> None:
    s = spec(image, env={"PMIX_NAMESPACE": "slurm.pmix.1.0", "PMIX_RANK": "0", "USER": "u"})
    env = CH.process_env(s, {"USER": "u"})
    assert env["PMIX_MCA_gds"] == "hash"
    assert "PMIX_MCA_gds" in CH.argv(s, "ch-run")[1]  # kept by the --unset-env glob
    asked = spec(image, env={"PMIX_NAMESPACE": "n", "PMIX_MCA_gds": "ds21"})
    assert CH.process_env(asked, {"USER": "u"})["PMIX_MCA_gds"] == "ds21"
    assert "PMIX_MCA_gds" not in CH.process_env(spec(image), {"USER": "u"})


def test_a_remote_image_is_planned_as_given_until_pulled() -> None:
    s = RunSpec("docker-daemon://img:1", "exec", ("true",), env={"USER": "u"}, cwd="/x")
    assert CH.argv(s, "ch-run")[-3:] == ["docker-daemon://img:1", "--", "true"]


def test_a_squashfs_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    sqfs = tmp_path / "img.sqfs"
    sqfs.write_bytes(b"hsqs")
    with pytest.raises(SpecError, match="no SquashFS") as caught:
        CH.argv(spec(sqfs), "ch-run")
    assert "ch-convert IMAGE DIR" in caught.value.fix
