"""Every argv in tests/unit/golden/runtimes.json, run: the golden file is pinned by what the
command inside the container sees, not by the code that wrote it.

apptainer and singularity argvs run through the Apptainer stand-in (tests/support/fake_apptainer.py,
which refuses the flags real Apptainer refuses) with a SIF-shaped image whose PATH leads to a
probe; the apptainer argvs also through the real Apptainer with a real SIF holding the same
probe, both reports held to the same expectation (the stand-in's differential test); docker
argvs run on the real engine with a busybox image holding the same probe. Only the program,
``TMP`` and (for docker) the image name are replaced. The probe, run as ``ctrain`` (exec),
``python`` (run) or from the shell, prints its working directory, user, arguments,
whether /data and /out are the bound directory and writable, and its whole environment, then
exits 7. What each entry must show is written here from the request the golden file was made
with (tests/unit/container/test_runtimes.py), not computed by ctrain.

``--gpus`` cannot run without GPUs: those docker argvs go through ``docker create`` and the
device request the engine stored is read back. podman is not run here: this host has no
catatonit for ``--init`` (and crun cannot set RLIMIT_NOFILE), see docs/testing.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from ctrain.container.runtimes import Request, plan_invocation
from ctrain.releases import RuntimeVersion, parse_version
from tests.support import fake_apptainer
from tests.support.helpers import REPO, need
from tests.support.host_env import HOST_ENV

GOLDEN = json.loads((REPO / "tests" / "unit" / "golden" / "runtimes.json").read_text())
BUSYBOX = Path("/bin/busybox")
EXIT = 7
# The probe: plain sh, busybox for the rest, so that it runs on the host and in the image.
PROBE = f"""#!/bin/sh
echo "prog=${{0##*/}}"
for a in "$@"; do echo "arg=$a"; done
echo "cwd=$(pwd)"
echo "user=$(/bin/busybox id -u):$(/bin/busybox id -g)"
for d in /data /out; do
  [ -e "$d/marker" ] || continue
  if (echo x > "$d/written") 2>/dev/null; then /bin/busybox rm "$d/written"; echo "$d=rw"
  else echo "$d=ro"; fi
done
echo ENV
/bin/busybox cat /proc/$$/environ
exit {EXIT}
"""
SHELL_INPUT = "exec ctrain from-shell\n"
# The request behind the golden file: what the container must get, written out.
CONTAINER_ENV = {
    "CTRAIN_MODE": "auto",
    "CUDA_VISIBLE_DEVICES": "2,3",
    "EXTRA": "a,b",
    "HOROVOD_FUSION_THRESHOLD": "0",
    "NCCL_DEBUG": "INFO",
    "OMPI_COMM_WORLD_RANK": "1",
    "PMIX_RANK": "1",
    "PYTHONNOUSERSITE": "1",
    "SLURM_JOB_ID": "42",
    "SLURM_PROCID": "1",
    "USER": "u",
}
NEVER = ("PYTHONPATH", "TF_CLI_CONFIG_FILE", "CUDA_HOME")  # host values that must stay out
ARGS = {
    "exec": ("ctrain", ["launch", "--", "python", "train.py", "--lr", "0.1"]),
    "run": ("python", ["train.py", "--lr", "0.1"]),
    "shell": ("ctrain", ["from-shell"]),
}
AWKWARD = {
    "SPACES": "two  words ",
    "QUOTES": 'it\'s "quoted"',
    "EVAL": "$HOME `id` $(id) \\n",
    "NEWLINE": "first\nsecond",
    "BACKSLASH_END": "ends with \\",
    "COMMAS": "a=1,b=2",
}


def keys(*runtimes: str) -> list[str]:
    return [k for k in GOLDEN if k.split("/")[0] in runtimes and "argv" in GOLDEN[k]]


def seen(stdout: bytes) -> dict[str, object]:
    """The probe's report: its lines before ENV, then the NUL-separated environment."""
    head, _, env = stdout.partition(b"\nENV\n")
    lines = head.decode().splitlines()
    pairs = (item.partition("=") for item in env.decode().split("\0") if item)
    report: dict[str, object] = {"env": {k: v for k, _, v in pairs}}
    report["args"] = [line[4:] for line in lines if line.startswith("arg=")]
    report.update(line.split("=", 1) for line in lines if not line.startswith("arg="))
    return report


def expected(key: str, user: str, cuda: str) -> dict[str, object]:
    runtime, action, _nv, binds, _overlay = key.split("/")
    prog, args = ARGS[action]
    want: dict[str, object] = {"prog": prog, "args": args, "cwd": "/work", "user": user}
    if binds == "True":
        want.update({"/data": "ro", "/out": "rw"})
    return want | {"env": CONTAINER_ENV | {"CUDA_VISIBLE_DEVICES": cuda}}


def check(report: dict[str, object], want: dict[str, object]) -> None:
    env = report.pop("env")
    assert isinstance(env, dict)
    wanted_env = want.pop("env")
    assert isinstance(wanted_env, dict)
    assert {k: env.get(k) for k in wanted_env} == wanted_env
    assert not [name for name in NEVER if name in env]
    assert "/opt/leak" not in env.get("LD_LIBRARY_PATH", "") and env.get("LANG") != "de_DE.UTF-8"
    assert report == want


def asked_version(program: str) -> RuntimeVersion:
    asked = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30)
    return parse_version(asked.stdout, program)


def write_probe(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("ctrain", "python"):
        (directory / name).write_text(PROBE)
        (directory / name).chmod(0o755)
    return directory


def data_dir(root: Path) -> Path:
    data = root / "data"
    data.mkdir()
    data.chmod(0o777)  # writable by the docker argvs' --user 1000:100 where bound rw
    (data / "marker").write_text("bound\n")
    return data


# -- apptainer and singularity, through the stand-in ---------------------------------------------


@pytest.fixture(scope="module")
def sif_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """TMP of the golden argvs: data/, img.sif (PATH starts at the probe), ov.img (ext3); and
    /data and /out on the host, where the stand-in mounts binds (an image would have them)."""
    need(os.geteuid() == 0, "the stand-in's bind mounts need root")
    root = tmp_path_factory.mktemp("sif")
    probe = write_probe(root / "probe")
    fake_apptainer.make_sif(root / "img.sif", {"PATH": f"{probe}:{fake_apptainer.DEFAULT_PATH}"})
    data_dir(root)
    for name in ("apptainer", "singularity"):
        fake_apptainer.install(root / "bin", name)
    made = subprocess.run(
        [root / "bin" / "apptainer", "overlay", "create", "--size", "64", "--sparse",
         root / "ov.img"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    created = [Path(d) for d in ("/data", "/out") if not Path(d).exists()]
    for directory in created:
        directory.mkdir()
    yield root
    for directory in created:
        directory.rmdir()


def run_standin(
    argv: list[str], env: Mapping[str, str], root: Path, stdin: str
) -> tuple[subprocess.CompletedProcess[bytes], dict[str, object]]:
    log = root / f"log-{os.getpid()}.jsonl"
    log.unlink(missing_ok=True)
    done = subprocess.run(
        [str(root / "bin" / Path(argv[0]).name), *argv[1:]],
        env={**env, "FAKE_APPTAINER_LOG": str(log)},
        cwd="/work",
        input=stdin.encode(),
        capture_output=True,
        timeout=60,
    )
    call = [line for line in fake_apptainer.calls(log) if "container" in line][-1]
    container = call["container"]
    assert isinstance(container, dict)
    return done, container


@pytest.mark.parametrize("key", keys("apptainer", "singularity"))
def test_apptainer_golden_argv_in_the_standin(key: str, sif_root: Path) -> None:
    entry = GOLDEN[key]
    argv = [arg.replace("TMP", str(sif_root)) for arg in entry["argv"]]
    env = {**HOST_ENV, **entry["process_env_added"]}
    action, overlay = key.split("/")[1], key.split("/")[4]
    done, container = run_standin(argv, env, sif_root, SHELL_INPUT if action == "shell" else "")
    assert done.returncode == EXIT, done.stderr.decode()
    uid = f"{os.getuid()}:{os.getgid()}"
    check(seen(done.stdout), expected(key, uid, "2,3"))
    assert container["nv"] is (key.split("/")[2] == "True")
    overlays = [] if overlay == "None" else [{"path": str(sif_root / "ov.img"),
                                              "readonly": overlay.endswith(":ro")}]  # fmt: skip
    assert container["overlays"] == overlays


@pytest.mark.parametrize("runtime", ["apptainer", "singularity"])
def test_awkward_values_arrive_verbatim_in_the_standin(runtime: str, sif_root: Path) -> None:
    """ctrain's own argv and environment for values with spaces, quotes, $, backticks,
    newlines and a trailing backslash: the command gets each as given."""
    request = Request(
        runtime,
        "exec",
        str(sif_root / "img.sif"),
        ("ctrain", "x"),
        launch=False,
        env_pairs=tuple(f"{k}={v}" for k, v in AWKWARD.items()),
    )
    program = str(sif_root / "bin" / runtime)
    invocation = plan_invocation(
        request,
        {"PATH": "/usr/bin", "HOME": "/root"},
        lambda _name: program,
        None,
        version_of=asked_version,
    )
    done, _ = run_standin(invocation.argv, invocation.env, sif_root, "")
    assert done.returncode == EXIT, done.stderr.decode()
    env = seen(done.stdout)["env"]
    assert isinstance(env, dict)
    assert {k: env.get(k) for k in AWKWARD} == AWKWARD


# -- apptainer on the real binary: the same argvs, the same report as in the stand-in -----------


@pytest.fixture(scope="module")
def real_sif(sif_root: Path) -> Path:
    """The probe in a real SIF built by the real apptainer from a directory: busybox, sh, the
    probe as ctrain and python on Apptainer's default PATH, /data, /out and /work, and a
    runscript that runs its arguments."""
    tree = sif_root / "tree"
    (tree / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, tree / "bin" / "busybox")
    (tree / "bin" / "sh").symlink_to("busybox")
    write_probe(tree / "usr" / "local" / "bin")
    runscript = (
        tree / ".singularity.d" / "runscript"
    )  # run IMG CMD ARGS: CMD ARGS, as in the stand-in
    runscript.parent.mkdir()
    runscript.write_text('#!/bin/sh\nexec "$@"\n')
    runscript.chmod(0o755)
    for directory in ("data", "out", "work"):
        (tree / directory).mkdir()
    image = sif_root / "real.sif"
    built = subprocess.run(
        ["apptainer", "build", "--force", str(image), str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return image


@pytest.mark.apptainer
@pytest.mark.parametrize("key", keys("apptainer"))
def test_apptainer_golden_argv_on_the_real_binary_as_in_the_standin(
    key: str, sif_root: Path, real_sif: Path
) -> None:
    """The differential test of the stand-in: each apptainer argv of the golden file through
    the real Apptainer and through the stand-in; both reports meet the same expectation."""
    entry = GOLDEN[key]
    argv = [arg.replace("TMP", str(sif_root)) for arg in entry["argv"]]
    env = {**HOST_ENV, **entry["process_env_added"]}
    stdin = SHELL_INPUT if key.split("/")[1] == "shell" else ""
    standin, _ = run_standin(argv, env, sif_root, stdin)
    program = shutil.which("apptainer")
    assert program is not None
    images = {str(sif_root / "img.sif"): str(real_sif)}
    real = subprocess.run(
        [program, *(images.get(arg, arg) for arg in argv[1:])],
        env=env,
        cwd="/work",
        input=stdin.encode(),
        capture_output=True,
        timeout=120,
    )
    assert (real.returncode, standin.returncode) == (EXIT, EXIT), real.stderr.decode()
    uid = f"{os.getuid()}:{os.getgid()}"
    reports = [seen(real.stdout), seen(standin.stdout)]
    for report in reports:
        check(report, expected(key, uid, "2,3"))
    assert reports[0] == reports[1]  # check() took the environments out: the rest is equal


# -- docker, on the real engine ------------------------------------------------------------------


def image_tar() -> bytes:
    """busybox, sh, a bash that is sh (docker shell's entrypoint), the probe (ctrain, python)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))

        add("bin/busybox", BUSYBOX.read_bytes())
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname, link.mtime = tarfile.SYMTYPE, "busybox", 0
        tar.addfile(link)
        add("bin/bash", b'#!/bin/sh\nexec /bin/sh "$@"\n')
        for name in ("ctrain", "python"):
            add(f"usr/local/bin/{name}", PROBE.encode())
    return out.getvalue()


@pytest.fixture(scope="module")
def docker_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(TMP of the golden argvs, the probe image's name)."""
    need(shutil.which("docker") is not None, "docker missing")
    need(BUSYBOX.is_file(), f"{BUSYBOX} missing (make system installs busybox-static)")
    data = image_tar()
    image = f"ctrain-test/oracle:{hashlib.sha256(data).hexdigest()[:12]}"
    made = subprocess.run(["docker", "import", "-", image], input=data, capture_output=True,
                          timeout=120)  # fmt: skip
    need(made.returncode == 0, f"docker import failed: {made.stderr.decode()}")
    root = tmp_path_factory.mktemp("docker")
    data_dir(root)
    yield root, image
    subprocess.run(["docker", "rmi", image], capture_output=True, timeout=60)


def engine_env(added: Mapping[str, str]) -> dict[str, str]:
    """The client's environment as the golden file's: HOST_ENV plus what ctrain adds."""
    client = {k: os.environ[k] for k in ("DOCKER_HOST", "DOCKER_CONFIG") if k in os.environ}
    return {**HOST_ENV, **added, **client}


def golden_docker_argv(key: str, root: Path, image: str) -> list[str]:
    argv = GOLDEN[key]["argv"]
    swapped = [image if arg == "TMP/img.sif" else arg.replace("TMP", str(root)) for arg in argv]
    return [shutil.which("docker") or "docker", *swapped[1:]]


@pytest.mark.docker
@pytest.mark.parametrize("key", [k for k in keys("docker") if k.split("/")[2] == "False"])
def test_docker_golden_argv_on_the_engine(key: str, docker_root: tuple[Path, str]) -> None:
    root, image = docker_root
    done = subprocess.run(
        golden_docker_argv(key, root, image),
        env=engine_env(GOLDEN[key]["process_env_added"]),
        input=SHELL_INPUT.encode() if key.split("/")[1] == "shell" else b"",
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == EXIT, done.stderr.decode()
    check(seen(done.stdout), expected(key, "1000:100", "2,3"))


@pytest.mark.docker
@pytest.mark.parametrize("key", [k for k in keys("docker") if k.split("/")[2] == "True"])
def test_docker_golden_gpu_argv_is_stored_by_the_engine(
    key: str, docker_root: tuple[Path, str]
) -> None:
    """No GPU here: ``docker create`` with the same flags, and what the engine stored (the
    device request, the environment, mounts, user, working directory) read back."""
    root, image = docker_root
    argv = golden_docker_argv(key, root, image)
    assert argv[1] == "run"
    made = subprocess.run(
        [argv[0], "create", *argv[2:]],
        env=engine_env(GOLDEN[key]["process_env_added"]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    container = made.stdout.strip()
    try:
        shown = subprocess.run(
            ["docker", "inspect", container], capture_output=True, text=True, timeout=60
        )
    finally:
        subprocess.run(["docker", "rm", container], capture_output=True, timeout=60)
    config, host = json.loads(shown.stdout)[0]["Config"], json.loads(shown.stdout)[0]["HostConfig"]
    [request] = host["DeviceRequests"]
    assert (request["DeviceIDs"], request["Capabilities"], request["Count"]) == (
        ["2", "3"], [["gpu"]], 0)  # fmt: skip
    env = dict(item.split("=", 1) for item in config["Env"])
    assert {k: env.get(k) for k in CONTAINER_ENV} == CONTAINER_ENV | {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert not [name for name in NEVER if name in env]
    mounts = {m["Target"]: m.get("ReadOnly", False) for m in host["Mounts"]}
    binds = {"/data": True, "/out": False} if key.split("/")[3] == "True" else {}
    assert mounts == {**binds, "/work": False}
    assert (config["User"], config["WorkingDir"], host["NetworkMode"], host["IpcMode"]) == (
        "1000:100", "/work", "host", "host")  # fmt: skip
    assert host["Init"] and host["AutoRemove"]


@pytest.mark.docker
def test_awkward_values_arrive_verbatim_on_docker(docker_root: tuple[Path, str]) -> None:
    root, image = docker_root
    request = Request(
        "docker",
        "exec",
        image,
        ("ctrain", "x"),
        launch=False,
        env_pairs=tuple(f"{k}={v}" for k, v in AWKWARD.items()),
        cwd=str(root),
    )
    program = shutil.which("docker") or "docker"
    invocation = plan_invocation(
        request, engine_env({}), lambda _n: program, None, version_of=asked_version
    )
    done = subprocess.run(invocation.argv, env=invocation.env, capture_output=True, timeout=120)
    assert done.returncode == EXIT, done.stderr.decode()
    env = seen(done.stdout)["env"]
    assert isinstance(env, dict)
    assert {k: env.get(k) for k in AWKWARD} == AWKWARD
