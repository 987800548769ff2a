"""ch-run's refusals, fixes and --dry-run notes word for word, and the image's environment file
read as ch-run reads it (the survivors of `mutmut run 'ctrain.container.charliecloud.*'`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.container.charliecloud import Charliecloud, image_env, parse_image_env
from ctrain.container.spec import Bind, Overlay, RunSpec
from ctrain.errors import SpecError

CH = Charliecloud()
ENV_LINE = (
    "container environment exactly: the image's ch/environment, then the variables below "
    "(ch-run --unset-env removes the rest)"
)


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """An image directory with /mnt, a symlink /data -> /mnt, a file /etc/hosts and no
    ch/environment."""
    root = tmp_path / "img"
    (root / "mnt").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "hosts").write_text("")
    (root / "data").symlink_to("mnt")
    return root


def spec(where: Path | str, **kw: object) -> RunSpec:
    base: dict[str, object] = {"image": str(where), "action": "exec", "command": ("python", "x")}
    base["env"] = {"USER": "u"}
    return RunSpec(**{**base, **kw})  # type: ignore[arg-type]


def refusal(s: RunSpec) -> tuple[str, str]:
    with pytest.raises(SpecError) as caught:
        CH.argv(s, "ch-run")
    return caught.value.message, caught.value.fix


def test_refusals_in_full(image: Path, tmp_path: Path) -> None:
    assert refusal(spec(image, overlay=Overlay("/o.img", False))) == (
        "--overlay needs apptainer or singularity; ch-run mounts no overlay image",
        "bind a directory instead (-B SRC:/mnt) or use --runtime apptainer",
    )
    assert refusal(spec(image, action="run", command=())) == (
        "ch-run has no runscript (ctrain run runs the image's entrypoint)",
        "use ctrain exec IMAGE -- CMD",
    )
    missing = tmp_path / "no-such-image"
    assert refusal(spec(missing)) == (
        f"image '{missing}' is not an image directory (ctrain runs no SquashFS file: "
        "docs/charliecloud.md)",
        "pull it: ctrain pull --runtime charliecloud docker-daemon://NAME:TAG, "
        "or convert it: ch-convert IMAGE DIR",
    )
    assert refusal(spec(image, nv=True)) == (
        f"--nv: ch-run has no --nv, and the image {image} holds no NVIDIA driver library "
        "(libcuda.so.1)",
        f"run `ch-fromhost --nvidia {image}` on the GPU node first (docs/charliecloud.md), "
        "or drop --nv",
    )
    no_user = ("ch-run refuses to start without USER", "export USER=$(id -un)")
    assert refusal(spec(image, env={"HOME": "/root"})) == no_user
    assert refusal(spec(image, env={"USER": ""})) == no_user


@pytest.mark.parametrize("bind", [Bind("/a:b", "/mnt"), Bind("/data", "/mnt:x")])
def test_a_colon_in_either_path_is_refused(image: Path, bind: Bind) -> None:
    assert refusal(spec(image, binds=(bind,))) == (
        f"bind path {bind.src}:{bind.dst} holds ':', which ch-run's -b SRC:DST cannot express",
        "bind a parent directory or a symlink without ':'",
    )


def test_a_read_only_bind_is_refused(image: Path) -> None:
    assert refusal(spec(image, binds=(Bind("/data", "/mnt", "ro"),))) == (
        "bind /data:/mnt:ro: ch-run has no read-only binds",
        "drop :ro (write -B /data:/mnt), or use --runtime apptainer or docker",
    )


@pytest.mark.parametrize("dst", ["/work", "/etc/hosts", "/X11"])
def test_a_destination_the_image_has_no_directory_for_is_refused(image: Path, dst: str) -> None:
    assert refusal(spec(image, binds=(Bind("/data", dst),))) == (
        f"bind destination {dst} is not a directory in the image {image} (ch-run mounts the "
        "image read-only and cannot create it)",
        f"bind onto a directory the image has (-B /data:/mnt; also /srv, /opt), "
        f"or add it to the image once: mkdir -p {image}{dst}",
    )


def test_a_directory_or_a_symlink_in_the_image_is_a_destination(image: Path) -> None:
    s = spec(image, binds=(Bind("/d1", "/mnt"), Bind("/d2", "/data")), cwd="/elsewhere")
    assert CH.argv(s, "ch-run") == [
        "ch-run",
        "-b",
        "/d1:/mnt",
        "-b",
        "/d2:/data",
        "--unset-env=!(USER)",
        str(image),
        "--",
        "python",
        "x",
    ]


def test_a_remote_image_is_neither_read_nor_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference read as a relative path names a directory with an environment file and no
    # /mnt: ctrain must not look there before the pull.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docker:" / "img:1" / "ch").mkdir(parents=True)
    (tmp_path / "docker:" / "img:1" / "ch" / "environment").write_text("FROM_DIR=1\n")
    s = spec("docker://img:1", binds=(Bind("/data", "/mnt"),), cwd="/elsewhere")
    assert CH.argv(s, "ch-run") == [
        "ch-run",
        "-b",
        "/data:/mnt",
        "--unset-env=!(USER)",
        "docker://img:1",
        "--",
        "python",
        "x",
    ]
    assert "FROM_DIR" not in CH.process_env(s, {})


def test_notes_without_tmpdir_and_a_directory_the_container_does_not_see(image: Path) -> None:
    assert CH.notes(spec(image, cwd="/home/someone/project")) == [
        ENV_LINE,
        "host /tmp is the container's /tmp (ch-run binds it)",
        "/home/someone/project is not in the container: it starts in ch-run's default",
    ]
    assert CH.notes(spec(image, cwd="/home/someone/project", workdir="/mnt")) == [
        ENV_LINE,
        "host /tmp is the container's /tmp (ch-run binds it)",
    ]


def test_notes_with_the_jobs_tmpdir_pmix_and_gpus(image: Path) -> None:
    (image / "lib64").mkdir()
    (image / "lib64" / "libcuda.so.1").write_text("")
    env = {"USER": "u", "TMPDIR": "/var/job/7", "PMIX_NAMESPACE": "slurm.pmix.7.0"}
    assert CH.notes(spec(image, env=env, nv=True, cwd="/var/job/7/w")) == [
        ENV_LINE,
        "host /var/job/7 is the container's /tmp (ch-run binds it)",
        "PMIx: PMIX_MCA_gds=hash (the server's store is outside the container)",
        "GPUs: the driver libraries ch-fromhost --nvidia put in the image",
    ]
    asked = {**env, "PMIX_MCA_gds": "ds21"}
    assert CH.notes(spec(image, env=asked, cwd="/var/job/7")) == [
        ENV_LINE,
        "host /var/job/7 is the container's /tmp (ch-run binds it)",
    ]


def test_image_env_reads_the_file_or_says_why_not(image: Path) -> None:
    assert image_env(str(image)) == {}  # no ch/environment: none of the image's own
    (image / "ch").mkdir()
    (image / "ch" / "environment").write_bytes("GREETING='grüß dich'\n".encode())
    assert image_env(str(image)) == {"GREETING": "grüß dich"}
    (image / "ch" / "environment").unlink()
    (image / "ch" / "environment").mkdir()
    with pytest.raises(SpecError) as caught:
        image_env(str(image))
    assert (caught.value.message, caught.value.fix) == (
        f"cannot read {image}/ch/environment: Is a directory",
        "check the image directory",
    )


def test_parse_image_env_quotes() -> None:
    text = "EMPTY=''\nONE='a'\nLONE='\nBARE=b\n=nokey\nHALF='x\n"
    assert parse_image_env(text) == {
        "EMPTY": "",
        "ONE": "a",
        "LONE": "'",
        "BARE": "b",
        "HALF": "'x",
    }
