"""ctrain's images for real: the recipe built from the wheelhouse on a local Debian 12 base,
pushed to the local registry, pulled back with `ctrain pull`, and a 2-rank training inside it
under srun with `ctrain exec`; the CPU image of every other TensorFlow of the version matrix
(`make image-cpu TF_VERSION=...`) with its labels, gates and a 2-rank Horovod training; the GPU
flavour of the default TensorFlow built on this GPU-less machine, its own `horovodrun
--check-build` gate passing with NCCL marked. No test names a version: they are the matrix's.

Builds go through the Makefile (`make wheelhouse`, `make image-cpu`, `make image`, `make push`)
with Docker (APPTAINER blanked: tests/support/images.make). Docker's layer cache and pip's
cache live outside the repository, so a warm run rebuilds nothing."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN, REGISTRY
from tests.support.images import (
    BUILD_TIMEOUT,
    DEFAULT,
    LABEL_PINS,
    OTHERS,
    REPO,
    base_image,
    cpu_image,
    gpu_image,
    make,
    pins,
)
from tests.support.real_runs import TINY, clean_env, reports, run

SCRIPTS = REPO / "tests" / "scripts"
pytestmark = [
    pytest.mark.docker,
    pytest.mark.builds("cpu-image", "other-cpu-images", "gpu-image"),
    pytest.mark.timeout(BUILD_TIMEOUT),
]


def labels(image: str) -> dict[str, str]:
    out = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return dict(json.loads(out))


def docker_run(image: str, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "run", "--rm", "--network", "host", "--entrypoint", argv[0], image, *argv[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def base() -> str:
    return base_image()


@pytest.fixture(scope="module", name="cpu_image")
def cpu_image_fixture() -> str:
    return cpu_image(DEFAULT)


@pytest.fixture(scope="module", params=OTHERS)
def other_cpu_image(request: pytest.FixtureRequest) -> tuple[str, str]:
    """(TensorFlow, image) of another TensorFlow of the matrix."""
    return request.param, cpu_image(request.param)


def check_cpu_image(image: str, tf: str) -> None:
    """Its labels are the matrix's versions for ``tf``; its `horovodrun --check-build` marks
    TensorFlow, MPI and Gloo; the installed versions are the labels' (install.sh verify)."""
    want = pins(tf, "cpu")
    found = labels(image)
    assert found["io.ctrain.flavour"] == "cpu"
    for label, pin in LABEL_PINS.items():
        assert found[label] == want[pin], label
    assert found["io.ctrain.cuda.version"] == found["io.ctrain.nccl.version"] == "none"
    check = docker_run(image, "horovodrun", "--check-build")
    assert check.returncode == 0, check.stderr
    for feature in ("TensorFlow", "MPI", "Gloo"):
        assert re.search(rf"\[X\] {feature}$", check.stdout, re.M), check.stdout
    verify = docker_run(image, "/opt/ctrain/install.sh", "verify", timeout=600)
    assert verify.returncode == 0, verify.stderr[-4000:]
    assert f"verify: tensorflow {tf}" in verify.stderr, verify.stderr[-4000:]


def test_cpu_image_labels_and_entrypoint(cpu_image: str) -> None:
    check_cpu_image(cpu_image, DEFAULT)
    entrypoint = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Entrypoint}}", cpu_image],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert json.loads(entrypoint) == ["ctrain", "launch", "--"]


def test_other_tensorflows_cpu_image(other_cpu_image: tuple[str, str]) -> None:
    tf, image = other_cpu_image
    check_cpu_image(image, tf)


def bench_and_examples_inside(image: str) -> float:
    """`ctrain examples list` and a 1-worker `ctrain bench --launcher local` in ``image``, away
    from any checkout: the benchmark and the examples ship in the package (issue 18). The
    bench's wall time in seconds."""
    listed = docker_run(image, "ctrain", "examples", "list")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "mnist_cnn.py",
        "resnet50_transfer.py",
    ]
    t0 = time.monotonic()
    done = docker_run(image, "ctrain", "bench", "--workers", "1", "--launcher", "local", *TINY,
                      "--out", "/tmp/bench", timeout=600)  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert re.search(r"^\| 1 \| single \| \d+\.\d \|", done.stdout, re.M), done.stdout
    return time.monotonic() - t0


def test_bench_and_examples_inside_the_cpu_image(cpu_image: str) -> None:
    print(f"ctrain bench --workers 1 in {cpu_image}: {bench_and_examples_inside(cpu_image):.0f} s")


def cached_steps(build_log: str) -> list[str]:
    """The steps scripts/image-build.sh reports, without a terminal, as taken from the cache
    (one line per step: ``image-build: [3/5] RUN ... (cached)``)."""
    return re.findall(r"^image-build: (\[.*) \(cached\)$", build_log, re.M)


def test_warm_rebuild_is_cached(cpu_image: str, base: str) -> None:
    """Nothing changed: every layer comes from the cache (ctrain's wheel is built reproducibly,
    so its layer too) and the wheelhouse is not gathered again."""
    _, output = make("image-cpu", f"BASE_IMAGE={base}")
    cached = "\n".join(cached_steps(output))
    for step in ("install.sh system", "install.sh python", "install.sh ctrain"):
        assert step in cached, f"a rebuild with nothing changed ran {step}:\n{output[-6000:]}"
    assert "gathering it" not in output, output[-6000:]


def buildkit() -> list[str]:
    """A `docker build` with BuildKit, chosen as scripts/image-build.sh chooses it."""
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode == 0:
        return ["docker", "buildx", "build", "--load"]
    return ["env", "DOCKER_BUILDKIT=1", "/usr/bin/docker", "build"]


def test_ca_bundle_is_trusted_during_the_build_and_not_kept(cpu_image: str, tmp_path: Path) -> None:
    """A site CA bundle (a TLS-inspecting proxy's) passed as the build secret `ca_bundle`
    reaches apt and pip through install.sh and ends up in no layer. The recipe's own steps mount
    the same secret (tests/unit/test_recipes.py); here install.sh's system step runs once more
    on the built image, so the check costs seconds instead of an uncached rebuild."""
    marker = "ctrain-test-ca-marker-7d41e0"
    bundle = tmp_path / "site-ca.pem"
    bundle.write_text(f"# {marker}\n" + Path("/etc/ssl/certs/ca-certificates.crt").read_text())
    (tmp_path / "Dockerfile").write_text(
        f"FROM {cpu_image}\nARG RUN_ID\n"
        "RUN --mount=type=secret,id=ca_bundle /opt/ctrain/install.sh system\n"
    )
    image = "ctrain-ca-test:ci"
    done = subprocess.run(
        [
            *buildkit(),
            "--progress",
            "plain",
            "--network",
            "host",
            "--build-arg",
            f"RUN_ID={time.time_ns()}",
            "--secret",
            f"id=ca_bundle,src={bundle}",
            "-t",
            image,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        assert done.returncode == 0, done.stderr[-4000:]
        assert "using the CA bundle in /run/secrets/ca_bundle for apt and pip" in done.stderr
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        assert save.stdout is not None
        found, tail = False, b""
        for chunk in iter(lambda: save.stdout.read(1 << 20), b""):  # type: ignore[union-attr]
            found = found or marker.encode() in tail + chunk
            tail = chunk[-64:]
        assert save.wait(timeout=600) == 0
        assert not found, "the CA bundle was written into the image"
    finally:
        subprocess.run(["docker", "rmi", image], capture_output=True, timeout=120)


@pytest.mark.slurm
def test_push_pull_and_train_two_ranks_inside(cpu_image: str, tmp_path: Path) -> None:
    make("push", f"REGISTRY={REGISTRY}", "FLAVOUR=cpu", timeout=1200)
    ref = f"{REGISTRY}/{cpu_image}"
    pushed = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", ref],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    subprocess.run(["docker", "rmi", ref], capture_output=True, timeout=120, check=True)
    cache = tmp_path / "cache"
    cache.mkdir()
    pulled = run(
        [CTRAIN, "pull", "--runtime", "docker", "--cache-dir", str(cache), ref],
        clean_env(),
        timeout=1200,
    )
    digests = json.loads(pushed)
    assert any(d.split("@")[1] in pulled.stdout + pulled.stderr for d in digests), pulled
    out = tmp_path / "out"
    run(
        [
            "srun",
            "-n",
            "2",
            "-t",
            "10",
            "--kill-on-bad-exit=1",
            CTRAIN,
            "exec",
            "--runtime",
            "docker",
            "-B",
            f"{SCRIPTS}:/ctrain-tests:ro",
            ref,
            "--",
            "python",
            "/ctrain-tests/train_tiny.py",
            str(out),
            "2",
        ],
        clean_env(),
        timeout=600,
        cwd=tmp_path,
    )
    chief, worker = reports(out, 2)
    assert chief["mode"] == worker["mode"] == "multiworker"
    assert chief["size"] == worker["size"] == 2
    assert chief["data_sum"] != worker["data_sum"]  # different data...
    assert chief["weights"] == worker["weights"]  # ...the same model


def test_horovod_trains_two_ranks_inside_another_tensorflows_image(
    other_cpu_image: tuple[str, str], tmp_path: Path
) -> None:
    """2 Horovod ranks started by the image's own OpenMPI (`ctrain exec --no-launch IMAGE --
    mpirun -np 2 ctrain launch -- python ...`) in the other TensorFlow's image: Horovod's
    allreduce keeps the replicas equal."""
    _, image = other_cpu_image
    out = tmp_path / "out"
    mpirun = ["mpirun", "--allow-run-as-root", "-np", "2", "ctrain", "launch", "--"]
    argv = [CTRAIN, "exec", "--runtime", "docker", "--no-launch", "-B",
            f"{SCRIPTS}:/ctrain-tests:ro", image, "--", *mpirun, "python",
            "/ctrain-tests/train_tiny.py", str(out), "2"]  # fmt: skip
    run(argv, clean_env(), timeout=600, cwd=tmp_path)
    chief, worker = reports(out, 2)
    assert chief["mode"] == worker["mode"] == "horovod"
    assert chief["size"] == worker["size"] == 2
    assert chief["data_sum"] != worker["data_sum"]  # different data...
    assert chief["weights"] == worker["weights"]  # ...the same model


def test_gpu_image_builds_with_nccl_on_a_gpu_less_machine() -> None:
    """The build's own gate (install.sh verify) marks NCCL and loads Horovod's ops beside
    TensorFlow's CUDA 12 libraries; checked again here on the finished image."""
    image = gpu_image()
    want = pins(DEFAULT, "gpu")
    found = labels(image)
    assert found["io.ctrain.flavour"] == "gpu"
    for label, pin in LABEL_PINS.items():
        assert found[label] == want[pin], label
    check = docker_run(image, "horovodrun", "--check-build")
    assert check.returncode == 0, check.stderr
    for feature in ("TensorFlow", "MPI", "Gloo", "NCCL"):
        assert re.search(rf"\[X\] {feature}$", check.stdout, re.M), check.stdout
    proof = docker_run(image, "/opt/ctrain/install.sh", "verify", timeout=600)
    assert proof.returncode == 0, proof.stderr[-4000:]
    assert "load beside TensorFlow's CUDA 12 libraries" in proof.stdout, proof.stdout[-2000:]
    assert "the loader opens every CUDA library TensorFlow opens" in proof.stderr
    # The same from a plain process of the image, with a runtime's LD_LIBRARY_PATH over it, and
    # doctor's line: every library by name through the image's loader configuration alone.
    opened = docker_run(
        image, "env", "LD_LIBRARY_PATH=/nonexistent", "python", "-m", "ctrain.train.cudalibs",
        "--loader",
    )  # fmt: skip
    assert opened.returncode == 0, opened.stdout + opened.stderr
    report = json.loads(opened.stdout)["libraries"]
    assert {entry["how"] for entry in report} == {"loader"}, report
    assert "libcusolver.so.11" in {entry["name"] for entry in report}
    doctor = docker_run(image, "ctrain", "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["cuda-libs"]["status"] == "PASS", checks["cuda-libs"]
    assert checks["cuda-libs"]["detail"].startswith("all 12 CUDA libraries TensorFlow opens")
