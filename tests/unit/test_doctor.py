from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from ctrain import doctor
from ctrain.cli import main
from ctrain.doctor import Check
from ctrain.launch.gpus import Gpu, list_gpus, parse_nvidia_smi, visible_gpus
from ctrain.launch.jobenv import JobEnv
from ctrain.settings import resolve
from ctrain.train import cudalibs
from ctrain.util import proc
from tests.support.podman_facts import ROOTFUL_INFO, ROOTLESS_INFO, SUBUID

# ---- captured output of the real tools ----

APPTAINER = "apptainer version 1.3.4\n"
SINGULARITY_CE = "singularity-ce version 3.11.4-jammy\n"
PODMAN = "podman version 4.9.3\n"
DOCKER_CLIENT = "Docker version 28.2.2, build e6534b4\n"
DOCKER_SERVER = "20.10.24+dfsg1\n"
DOCKER_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?\n"
)
OPEN_MPI = "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
MPICH = (
    "HYDRA build details:\n"
    "    Version:                                 4.0\n"
    "    Release Date:                            Fri Jan 21 10:42:29 CST 2022\n"
    "    CC:                              gcc    \n"
)
NVIDIA_SMI = (
    "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-4c2a4b3f-6b1e-0f3c-8d8e-1a2b3c4d5e6f)\n"
    "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-9f8e7d6c-5b4a-3921-8d8e-0a1b2c3d4e5f)\n"
    "GPU 2: Tesla V100-SXM2-16GB (UUID: GPU-12345678-1234-1234-1234-123456789abc)\n"
)
NVIDIA_SMI_MIG = (
    "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-4c2a4b3f-6b1e-0f3c-8d8e-1a2b3c4d5e6f)\n"
    "  MIG 3g.20gb     Device  0: (UUID: MIG-5c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f)\n"
)
TF_STDOUT = (
    "2026-11-22 12:15:46.627664: I external/local_xla/xla/tsl/cuda/cudart_stub.cc:32] "
    "Could not find cuda drivers on your machine, GPU will not be used.\n"
    '{"version": "2.18.1", "dists": {"tf-keras": "2.18.0", "horovod": "0.28.1"}, "gpus": []}\n'
)
TF_MISSING = (
    "Traceback (most recent call last):\n"
    '  File "<string>", line 2, in <module>\n'
    "ModuleNotFoundError: No module named 'tensorflow'\n"
)
HOROVOD_STDOUT = '{"version": "0.28.1", "mpi": true, "gloo": true, "nccl": 0}\n'


def test_parse_version() -> None:
    assert doctor.parse_version(APPTAINER) == "1.3.4"
    assert doctor.parse_version(SINGULARITY_CE) == "3.11.4-jammy"
    assert doctor.parse_version(PODMAN) == "4.9.3"
    assert doctor.parse_version(DOCKER_CLIENT) == "28.2.2"
    assert doctor.parse_version("odd output\n") == "odd output"
    assert doctor.parse_version("") == "unknown version"


def test_parse_docker_server() -> None:
    assert doctor.parse_docker_server(DOCKER_SERVER) == "20.10.24+dfsg1"
    assert doctor.parse_docker_server("") is None
    assert doctor.parse_docker_server("<no value>\n") is None


def test_parse_nvidia_smi() -> None:
    assert parse_nvidia_smi(NVIDIA_SMI) == (
        Gpu("0", "NVIDIA A100-SXM4-40GB"),
        Gpu("1", "NVIDIA A100-SXM4-40GB"),
        Gpu("2", "Tesla V100-SXM2-16GB"),
    )
    assert parse_nvidia_smi(NVIDIA_SMI_MIG) == (Gpu("0", "NVIDIA A100-SXM4-40GB"),)
    assert parse_nvidia_smi("No devices found.\n") == ()
    names = [gpu.name for gpu in parse_nvidia_smi(NVIDIA_SMI)]
    assert doctor.count_names(names) == "2 x NVIDIA A100-SXM4-40GB, 1 x Tesla V100-SXM2-16GB"


def test_parse_mpirun_version() -> None:
    assert doctor.parse_mpirun_version(OPEN_MPI) == "mpirun (Open MPI) 4.1.4"
    assert doctor.parse_mpirun_version(MPICH) == "MPICH (Hydra) 4.0"
    assert doctor.parse_mpirun_version("") == "unknown version"


def test_parse_probe() -> None:
    assert doctor.parse_probe(TF_STDOUT) == {
        "version": "2.18.1",
        "dists": {"tf-keras": "2.18.0", "horovod": "0.28.1"},
        "gpus": [],
    }
    with pytest.raises(ValueError):
        doctor.parse_probe("no json here\n")


# ---- a runner that answers from captured output and records argv ----


class FakeRunner:
    def __init__(self, tools: Mapping[str, str], answers: Mapping[str, tuple[int, str, str]]):
        self.tools = dict(tools)  # program -> path
        self.answers = dict(answers)  # "program args..." or "probe:<name>" -> (rc, out, err)
        self.calls: list[tuple[list[str], dict[str, str]]] = []

    def which(self, program: str, environ: Mapping[str, str] | None = None) -> str | None:
        return self.tools.get(program)

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        timeout: float | None = 60,
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), dict(env or {})))
        if argv[0] == sys.executable and argv[1:] == ["-m", cudalibs.__name__]:
            key = "probe:cuda-libs"
        elif argv[0] == sys.executable:
            module = tuple(argv[2:])
            key = "probe:tensorflow" if module == doctor.tf_probe() else "probe:horovod"
        else:
            key = " ".join([Path(argv[0]).name, *argv[1:]])
        code, out, err = self.answers.get(key, (127, "", f"{key}: not faked"))
        return subprocess.CompletedProcess(list(argv), code, out, err)


# python -m ctrain.train.cudalibs where the loader opens every library
CUDA_LIBS_STDOUT = json.dumps(
    {
        "loader_only": False,
        "libraries": [
            {"name": name, "how": "loader", "path": f"/site/nvidia/x/lib/{name}"}
            for name in cudalibs.CUDA12_LIBRARIES
        ],
    }
)

HEALTHY_TOOLS = {
    "apptainer": "/usr/bin/apptainer",
    "docker": "/usr/bin/docker",
    "sbatch": "/usr/bin/sbatch",
    "srun": "/usr/bin/srun",
    "mpirun": "/usr/bin/mpirun",
}
HEALTHY_ANSWERS = {
    "apptainer --version": (0, APPTAINER, ""),
    "docker version --format {{.Server.Version}}": (0, DOCKER_SERVER, ""),
    "docker --version": (0, DOCKER_CLIENT, ""),
    "podman --version": (0, PODMAN, ""),
    "nvidia-smi -L": (0, NVIDIA_SMI, ""),
    "mpirun --version": (0, OPEN_MPI, ""),
    "probe:tensorflow": (0, TF_STDOUT, ""),
    "probe:horovod": (0, HOROVOD_STDOUT, ""),
    "probe:cuda-libs": (0, CUDA_LIBS_STDOUT, ""),
}


def fake(monkeypatch: pytest.MonkeyPatch, tools: Mapping[str, str] = HEALTHY_TOOLS) -> FakeRunner:
    runner_ = FakeRunner(tools, HEALTHY_ANSWERS)
    monkeypatch.setattr(proc, "which", runner_.which)
    monkeypatch.setattr(proc, "run", runner_.run)
    return runner_


def test_runtime_lists_each_found_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch)
    check = doctor.check_runtime({})
    assert check == Check(
        "runtime",
        "PASS",
        "apptainer 1.3.4 (/usr/bin/apptainer); docker 20.10.24+dfsg1 (/usr/bin/docker)",
    )


def test_runtime_docker_daemon_down(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch, {"docker": "/usr/bin/docker"})
    runner_.answers["docker version --format {{.Server.Version}}"] = (1, "", DOCKER_DOWN)
    check = doctor.check_runtime({})
    assert check.status == "WARN"
    assert check.detail == "docker 28.2.2 (/usr/bin/docker): daemon not reachable"
    assert "Docker daemon" in check.fix
    assert "--runtime host" in check.fix

    runner_.tools["apptainer"] = "/usr/bin/apptainer"
    check = doctor.check_runtime({})
    assert check.status == "PASS"
    assert "daemon not reachable" in check.detail


def test_runtime_charliecloud(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch, {"ch-run": "/usr/bin/ch-run"})
    runner_.answers["ch-run --version"] = (0, "", "0.31\n")  # on stderr, as ch-run prints it
    runner_.answers["ch-checkns"] = (0, "ok\n", "")
    check = doctor.check_runtime({})
    assert check == Check(
        "runtime",
        "PASS",
        "charliecloud 0.31 (/usr/bin/ch-run): user namespaces work; "
        "image directories (SquashFS not used)",
    )
    assert runner_.calls[0][1]["USER"]  # ch-run --version refuses to run without USER
    runner_.answers["ch-checkns"] = (1, "", "ch-checkns: unshare(2) failed: EPERM\n")
    check = doctor.check_runtime({})
    assert check.status == "WARN" and "user namespaces unavailable" in check.detail


def test_runtime_none(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, {})
    check = doctor.check_runtime({})
    assert check.status == "WARN"
    assert check.detail == "none of apptainer, singularity, charliecloud, docker, podman"
    assert "host" in check.fix


def subid_files(subuid: str, subgid: str) -> Callable[[str], str]:
    return {"/etc/subuid": subuid, "/etc/subgid": subgid}.get  # type: ignore[return-value]


def test_podman_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch)
    check = doctor.check_podman({}, ("alice", 1001), subid_files("", ""))
    assert check == Check("podman", "PASS", "not installed (needed only for --runtime podman)")


@pytest.mark.parametrize("info", [ROOTFUL_INFO, ROOTLESS_INFO])
def test_podman_mode(info: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch, {**HEALTHY_TOOLS, "podman": "/usr/bin/podman"})
    runner_.answers["podman info --format json"] = (0, json.dumps(info), "")
    check = doctor.check_podman({}, ("alice", 1001), subid_files(SUBUID, SUBUID))
    assert check.status == "PASS"
    rootless = info is ROOTLESS_INFO
    mode = "rootless" if rootless else "rootful"
    assert check.detail.startswith(f"podman 4.3.1 {mode}, cgroup manager cgroupfs (cgroups v1), ")
    assert check.detail.endswith("alice has subordinate uids and gids" if rootless else "podman)")


def test_rootless_podman_without_subordinate_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch, {"podman": "/usr/bin/podman"})
    runner_.answers["podman info --format json"] = (0, json.dumps(ROOTLESS_INFO), "")
    check = doctor.check_podman({}, ("dave", 1004), subid_files(SUBUID, "dave:100000:65536\n"))
    assert check.status == "WARN"
    assert check.detail.endswith("65536 subordinate ids wanted for dave, found /etc/subuid: 0")
    assert "--add-subuids 100000-165535 --add-subgids 100000-165535 dave" in check.fix


def test_podman_that_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch, {"podman": "/usr/bin/podman"})
    runner_.answers["podman info --format json"] = (125, "", "Error: cannot set up namespace\n")
    check = doctor.check_podman({}, ("dave", 1004), subid_files("", ""))
    assert check == Check(
        "podman",
        "WARN",
        "podman info failed: Error: cannot set up namespace",
        "run `/usr/bin/podman info` to see why it fails",
    )


def test_gpus() -> None:
    none = doctor.check_gpus(None, {})
    assert none.status == "WARN"
    assert none.detail.startswith("no GPU visible: training runs on CPU")
    assert "CUDA_VISIBLE_DEVICES unset" in none.detail
    some = doctor.check_gpus(["A100", "A100"], {"CUDA_VISIBLE_DEVICES": "0,1"})
    assert some == Check("gpus", "PASS", "2: 2 x A100; CUDA_VISIBLE_DEVICES=0,1")


def test_list_gpus_and_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch, {"nvidia-smi": "/usr/bin/nvidia-smi"})
    assert list_gpus({}) == parse_nvidia_smi(NVIDIA_SMI)
    job = JobEnv.from_environ({}, "node1")
    assert visible_gpus(job, {}) == ("0", "1", "2")
    pinned = JobEnv.from_environ({"CUDA_VISIBLE_DEVICES": "1"}, "node1")
    assert visible_gpus(pinned, {}) == ("1",)
    runner_.answers["nvidia-smi -L"] = (9, "", "NVIDIA-SMI has failed")
    assert list_gpus({}) is None
    assert visible_gpus(job, {}) == ()
    runner_.tools.clear()
    assert list_gpus({}) is None


def test_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch)
    job = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "8"}
    check = doctor.check_slurm(job)
    assert check.status == "PASS"
    assert check.detail.startswith("inside job 4242 (step 0, 8 tasks)")
    assert doctor.check_slurm({}).detail.startswith("not inside a Slurm job")
    del runner_.tools["sbatch"]
    check = doctor.check_slurm({})
    assert check.status == "WARN"
    assert "sbatch not found" in check.detail


def test_tensorflow_probe_runs_in_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch)
    check = doctor.check_tensorflow({"PATH": "/bin"}, None)
    assert check == Check(
        "tensorflow", "PASS", "2.18.1, tf_keras 2.18.0, horovod 0.28.1; 0 GPU(s) seen"
    )
    argv, env = runner_.calls[-1]
    assert argv == [sys.executable, "-m", "ctrain.train.tf_probe", *doctor.probe_dists()]
    assert env["PATH"] == "/bin"
    assert env["TF_USE_LEGACY_KERAS"] == "1"


def test_tensorflow_problems(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch)
    assert doctor.check_tensorflow({}, ["A100"]).status == "WARN"  # GPUs TF cannot see
    runner_.answers["probe:tensorflow"] = (
        0,
        '{"version": "2.18.1", "dists": {}, "gpus": []}\n',
        "",
    )
    check = doctor.check_tensorflow({}, None)
    assert (check.status, "tf_keras missing" in check.detail) == ("WARN", True)
    runner_.answers["probe:tensorflow"] = (1, "", TF_MISSING)
    check = doctor.check_tensorflow({}, None)
    assert check.status == "FAIL"
    assert check.detail.endswith("ModuleNotFoundError: No module named 'tensorflow'")
    assert "make install" in check.fix
    runner_.answers["probe:tensorflow"] = (0, "garbage\n", "")
    assert doctor.check_tensorflow({}, None).status == "FAIL"


def probe(version: str, **dists: str) -> tuple[int, str, str]:
    found = {name.replace("_", "-"): v for name, v in dists.items()}
    return 0, json.dumps({"version": version, "dists": found, "gpus": []}) + "\n", ""


def test_the_versions_are_compared_with_the_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """A row of the matrix passes, CUDA wheels and all; anything else warns with the fix."""
    runner_ = fake(monkeypatch)
    gpu = {"nvidia_cuda_runtime_cu12": "12.9.79", "nvidia_cudnn_cu12": "9.24.0.43"}
    runner_.answers["probe:tensorflow"] = probe(
        "2.21.0", tf_keras="2.21.0", keras="3.15.1", horovod="0.28.1", **gpu,
        nvidia_nccl_cu12="2.30.7",
    )  # fmt: skip
    check = doctor.check_tensorflow({}, None)
    assert check == Check(
        "tensorflow",
        "PASS",
        "2.21.0, tf_keras 2.21.0, keras 3.15.1, horovod 0.28.1, CUDA 12.9.79, cuDNN 9.24.0.43, "
        "NCCL 2.30.7; 0 GPU(s) seen",
    )
    runner_.answers["probe:tensorflow"] = probe(
        "2.21.0", tf_keras="2.18.0", horovod="0.28.1", **gpu, nvidia_nccl_cu12="2.21.5"
    )
    check = doctor.check_tensorflow({}, None)
    assert check.status == "WARN"
    assert check.detail.endswith(
        "; tf-keras 2.18.0 (matrix: 2.21.0), nvidia-nccl-cu12 2.21.5 (matrix: 2.30.7)"
    )
    assert check.fix.startswith("TF_VERSION=2.21.0 make install (src/ctrain/matrix.toml), or ")
    runner_.answers["probe:tensorflow"] = probe("2.17.0", tf_keras="2.17.0")
    check = doctor.check_tensorflow({}, None)
    assert check.status == "WARN"
    assert check.detail.endswith("; TensorFlow 2.17.0 is not in ctrain's version matrix")
    assert check.fix.startswith("TF_VERSION=2.21.0 or 2.18.1 make install ")


def test_the_probe_asks_for_every_version_the_matrix_pins() -> None:
    rows = doctor.version_matrix()
    wanted = {"tf-keras", "horovod"} | {n for row in rows for n in row.cuda_wheels}
    assert wanted <= set(doctor.probe_dists())
    assert set(doctor.tf_probe()[1:]) == set(doctor.probe_dists())


def test_horovod(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch)
    check = doctor.check_horovod({}, None)
    assert check == Check("horovod", "PASS", "0.28.1: MPI yes, Gloo yes, NCCL no")
    assert runner_.calls[-1][1]["TF_USE_LEGACY_KERAS"] == "1"
    assert doctor.check_horovod({}, ["A100"]).status == "WARN"
    runner_.answers["probe:horovod"] = (0, HOROVOD_STDOUT.replace("0}", "21805}"), "")
    check = doctor.check_horovod({}, ["A100"])
    assert (check.status, check.detail) == ("PASS", "0.28.1: MPI yes, Gloo yes, NCCL yes")
    runner_.answers["probe:horovod"] = (0, HOROVOD_STDOUT.replace("true", "false"), "")
    assert doctor.check_horovod({}, None).status == "FAIL"
    runner_.answers["probe:horovod"] = (1, "", "ModuleNotFoundError: No module named 'horovod'")
    assert doctor.check_horovod({}, None).status == "FAIL"


def test_mpi(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch)
    assert doctor.check_mpi({}) == Check("mpi", "PASS", "mpirun (Open MPI) 4.1.4 (/usr/bin/mpirun)")
    runner_.tools.clear()
    check = doctor.check_mpi({})
    assert (check.status, check.detail) == ("WARN", "mpirun not found")


def cache_check(env: dict[str, str], cwd: Path) -> Check:
    return doctor.check_cache(env, resolve({}, env, cwd))


def test_cache(tmp_path: Path) -> None:
    base = {"HOME": str(tmp_path / "home"), "CTRAIN_MIN_FREE_GB": "1"}
    node = {"TMPDIR": str(tmp_path / "node")}
    good = cache_check({**base, **node, "CTRAIN_CACHE_DIR": str(tmp_path / "c")}, tmp_path)
    assert good.status == "PASS"
    assert good.detail.startswith(f"{tmp_path / 'c'} (env CTRAIN_CACHE_DIR), ")
    assert good.detail.endswith(f"temporary space {tmp_path / 'node'}")
    home = cache_check(base, tmp_path)
    assert home.status == "WARN"
    assert "under $HOME" in home.detail
    full = cache_check({**base, "CTRAIN_CACHE_DIR": "/x", "CTRAIN_MIN_FREE_GB": "999999"}, tmp_path)
    assert full.status == "WARN"
    assert "under 999999 GiB" in full.detail
    assert cache_check({}, tmp_path).status == "WARN"  # no HOME, no scratch: the ConfigError


def test_cache_dir_from_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "ctrain.toml").write_text(f'cache_dir = "{tmp_path / "site"}"\nmin_free_gb = 1\n')
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    check = cache_check(env, tmp_path)
    assert check.status == "PASS"
    assert check.detail.startswith(f"{tmp_path / 'site'} (file {tmp_path / 'ctrain.toml'}:1), ")


def test_tmp(tmp_path: Path) -> None:
    env = {"TMPDIR": str(tmp_path), "CTRAIN_MIN_FREE_GB": "1"}
    assert doctor.check_tmp(env, resolve({}, env, tmp_path)).status == "PASS"
    env = {"CTRAIN_MIN_FREE_GB": "999999"}
    low = doctor.check_tmp(env, resolve({}, env, tmp_path))
    assert low.status == "WARN"
    assert low.detail.startswith("/tmp (TMPDIR unset)")


def test_a_crash_becomes_a_fail_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(proc, "which", boom)
    monkeypatch.setattr(proc, "run", boom)
    env = {"HOME": "/nonexistent-home"}
    results = doctor.run_checks(env, resolve({}, env, Path("/nonexistent-cwd")))
    names = ["runtime", "podman", "cache", "tmp", "slurm", "gpus", "gpu-code", "cuda-libs"]
    names += ["tensorflow", "horovod", "mpi", "mpi-match"]
    assert [r.name for r in results] == names
    crashed = {r.name for r in results if r.detail == "check crashed: RuntimeError: boom"}
    assert crashed == {
        "runtime",
        "podman",
        "slurm",
        "gpu-code",
        "cuda-libs",
        "tensorflow",
        "horovod",
        "mpi",
    }
    assert doctor.failed(results)


RESULTS = [
    Check("runtime", "PASS", "apptainer 1.3.4 (/usr/bin/apptainer)"),
    Check("gpus", "WARN", "no GPU visible: training runs on CPU", "run on a GPU node"),
    Check("horovod", "FAIL", "not importable", "`make install`"),
    Check("mpi", "PASS", "mpirun (Open MPI) 4.1.4", "never shown"),
]


def test_render_text() -> None:
    assert doctor.render(RESULTS, as_json=False) == (
        "PASS  runtime      apptainer 1.3.4 (/usr/bin/apptainer)\n"
        "WARN  gpus         no GPU visible: training runs on CPU -> run on a GPU node\n"
        "FAIL  horovod      not importable -> `make install`\n"
        "PASS  mpi          mpirun (Open MPI) 4.1.4"
    )


def test_render_json() -> None:
    data = json.loads(doctor.render(RESULTS, as_json=True))
    assert data["checks"][1] == {
        "name": "gpus",
        "status": "WARN",
        "detail": "no GPU visible: training runs on CPU",
        "fix": "run on a GPU node",
    }
    assert [c["name"] for c in data["checks"]] == ["runtime", "gpus", "horovod", "mpi"]
    assert data["summary"] == {"PASS": 2, "WARN": 1, "FAIL": 1, "failed": True}


def test_failed() -> None:
    assert doctor.failed(RESULTS)
    assert not doctor.failed([r for r in RESULTS if r.status != "FAIL"])
    assert not doctor.failed([])


@pytest.mark.parametrize("broken", [False, True])
def test_cli_doctor_json(broken: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner_ = fake(monkeypatch)
    if broken:
        runner_.answers["probe:tensorflow"] = (1, "", TF_MISSING)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CTRAIN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CTRAIN_MIN_FREE_GB", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    result = CliRunner().invoke(main, ["doctor", "--json"], catch_exceptions=False)
    data = json.loads(result.stdout)
    statuses = {c["name"]: c["status"] for c in data["checks"]}
    assert statuses["tensorflow"] == ("FAIL" if broken else "PASS")
    assert data["summary"]["failed"] is broken
    assert result.exit_code == (1 if data["summary"]["failed"] else 0)


def test_podman_info_not_understood(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch, {"podman": "/usr/bin/podman"})
    runner_.answers["podman info --format json"] = (0, '{"host": {}}', "")
    check = doctor.check_podman({}, ("dave", 1004), subid_files("", ""))
    assert check.status == "WARN"
    assert check.detail.startswith("`podman info --format json` not understood: KeyError(")


SRUN_HELP_PYXIS = """\
Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]
      --container-env=NAME[,NAME...]
                              [pyxis] names of environment variables to override
      --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH
                              [pyxis] the image to use for the container
"""
SRUN_HELP_PLAIN = """\
Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]
      --container=id          Path to OCI container bundle
      --container-id=id       OCI container ID
"""


def test_pyxis_loaded() -> None:
    assert doctor.pyxis_loaded(SRUN_HELP_PYXIS)
    assert not doctor.pyxis_loaded(SRUN_HELP_PLAIN)  # Slurm's own --container is not pyxis
    assert not doctor.pyxis_loaded("see --container-image in pyxis' docs")


def test_slurm_reports_pyxis_and_enroot(monkeypatch: pytest.MonkeyPatch) -> None:
    runner_ = fake(monkeypatch)
    assert doctor.check_slurm({}).detail.endswith("; no pyxis, no enroot")
    runner_.answers["srun --help"] = (0, SRUN_HELP_PYXIS, "")
    runner_.tools["enroot"] = "/usr/bin/enroot"
    runner_.answers["enroot version"] = (0, "4.1.2\n", "")
    check = doctor.check_slurm({})
    assert check.status == "PASS"
    assert check.detail.endswith("; pyxis loaded, enroot 4.1.2 (/usr/bin/enroot)")
    runner_.answers["enroot version"] = (1, "", "enroot: broken\n")
    assert "pyxis loaded, no enroot (" in doctor.check_slurm({}).detail


def test_the_matrix_is_read_when_a_check_needs_it_not_at_import() -> None:
    """``ctrain --help`` (and importing the doctor) reads no version matrix."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from ctrain import matrix\n"
        "def refuse(*args, **kwargs):\n"
        "    raise SystemExit('the matrix was read')\n"
        "matrix.load = refuse\n"
        "import ctrain.doctor\n"
        "from ctrain.cli import main\n"
        "result = CliRunner().invoke(main, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
