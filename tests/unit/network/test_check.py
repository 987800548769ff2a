"""The network check's impure part and ``ctrain doctor --network``: the child it would run, its
log parsed, the facts gathered from fake trees, and the command's lines, JSON and exit code."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ctrain.cli import main
from ctrain.errors import ExternalToolError
from ctrain.names import Launched, Mode
from ctrain.network import advice, check
from tests.support.fake_rdma import fake_root, fake_sysfs
from tests.support.helpers import run_ctrain, sandbox
from tests.support.nccl_logs import SOCKET_2_21

LAUNCHED = Launched(
    mode=Mode.MULTIWORKER,
    rank=1,
    size=2,
    local_rank=0,
    local_size=1,
    collective="nccl",
    collective_timeout=600,
).to_env()


def test_outside_ctrain_launch_the_probe_goes_through_it() -> None:
    argv = check.probe_argv({"SLURM_PROCID": "1"}, "/venv/bin/python")
    assert argv[:8] == [
        "/venv/bin/python", "-m", "ctrain", "launch", "--collective", "nccl", "--quiet", "--"
    ]  # fmt: skip
    assert argv[8:] == ["/venv/bin/python", "-m", "ctrain.network.allreduce_probe"]


def test_under_ctrain_launch_the_probe_takes_the_rank_it_was_given() -> None:
    assert check.probe_argv(LAUNCHED, "/py") == ["/py", "-m", "ctrain.network.allreduce_probe"]


def test_the_probe_asks_nccl_for_info() -> None:
    env = check.probe_env({"PATH": "/bin", "NCCL_DEBUG": "WARN"})
    assert env["NCCL_DEBUG"] == "INFO" and env["PATH"] == "/bin"
    assert env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"


class FakeRun:
    """Stands in for proc.run: records the call, answers with the given output or error."""

    def __init__(self, stdout: str = "", code: int = 0, error: Exception | None = None) -> None:
        self.stdout, self.code, self.error = stdout, code, error
        self.calls: list[tuple[list[str], dict[str, str], float | None]] = []

    def __call__(
        self, argv: Sequence[str], env: Any = None, timeout: float | None = 60
    ) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), dict(env or {}), timeout))
        if self.error:
            raise self.error
        return subprocess.CompletedProcess(list(argv), self.code, self.stdout, "boom\n")


def test_no_gpus_runs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRun()
    monkeypatch.setattr(check.proc, "run", fake)
    assert check.run_probe({}, 0) == advice.NcclOutcome(0)
    assert fake.calls == []


def test_the_probe_log_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRun(SOCKET_2_21)
    monkeypatch.setattr(check.proc, "run", fake)
    outcome = check.run_probe(LAUNCHED, 2)
    assert outcome.error == "" and outcome.gpus == 2
    (report,) = outcome.reports
    assert report.uses_socket and report.rank == 3
    (argv, env, timeout) = fake.calls[0]
    assert env["NCCL_DEBUG"] == "INFO" and timeout == check.PROBE_TIMEOUT


def test_a_failing_or_hanging_probe_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check.proc, "run", FakeRun(SOCKET_2_21, code=1))
    assert check.run_probe(LAUNCHED, 2).error == "boom"
    hung = ExternalToolError("python -c ... did not finish within 300.0 s", "")
    monkeypatch.setattr(check.proc, "run", FakeRun(error=hung))
    assert check.run_probe(LAUNCHED, 2) == advice.NcclOutcome(2, (), hung.message)


def test_gather_reads_the_trees_it_is_given(tmp_path: Path) -> None:
    sys_root = fake_sysfs(tmp_path)
    root = fake_root(tmp_path / "c", uverbs=False, lib=True, drivers=True, providers=True)
    environ = {"NCCL_IB_HCA": "mlx5_0", "SLURM_JOB_ID": "7", "container": "podman"}
    facts = check.gather(environ, str(sys_root), str(root), gpus=0)
    assert [d.name for d in facts.devices] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    assert facts.seen.uverbs == () and facts.seen.container == "podman"
    assert facts.env == {"NCCL_IB_HCA": "mlx5_0"}
    found = {f.name: f for f in advice.advise(facts)}
    assert found["rdma-view"].status == "FAIL"
    assert "--bind /dev/infiniband" in found["rdma-view"].fix
    assert found["nccl"].detail == advice.NO_GPUS


def _fake_network(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """ctrain doctor --network on a node with active devices that its container cannot see."""
    sys_root = fake_sysfs(tmp_path)
    root = fake_root(tmp_path / "c", uverbs=False, lib=True, drivers=True, providers=True)
    real = check.gather
    monkeypatch.setattr(
        check, "gather", lambda environ: real(environ, str(sys_root), str(root), gpus=0)
    )


def test_cli_lines_and_exit_code(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_network(monkeypatch, tmp_path)
    result = CliRunner().invoke(main, ["doctor", "--network"], catch_exceptions=False)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["PASS", "rdma"],
        ["FAIL", "rdma-view"],
        ["PASS", "nccl-env"],
        ["WARN", "nccl"],
    ]
    assert " -> give the container the RDMA devices: `ctrain exec --bind /dev/infin" in lines[1]
    assert "no GPUs: NCCL not checked -> " in lines[3]


def test_cli_json_and_the_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _fake_network(monkeypatch, tmp_path)
    monkeypatch.setenv("CTRAIN_DOCTOR_NETWORK", "1")
    result = CliRunner().invoke(main, ["doctor", "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert [c["name"] for c in data["checks"]] == ["rdma", "rdma-view", "nccl-env", "nccl"]
    assert data["summary"] == {"PASS": 2, "WARN": 1, "FAIL": 1, "failed": True}


def test_help_names_the_variable() -> None:
    result = CliRunner().invoke(main, ["doctor", "--help"], catch_exceptions=False)
    assert "--network" in result.output and "CTRAIN_DOCTOR_NETWORK" in result.output


def test_the_command_on_this_machine(tmp_path: Path) -> None:
    """The real command, as a process: the test machines have no GPUs; a node without RDMA
    devices WARNs that sockets are all there is, one with them reports them."""
    box = sandbox(tmp_path)
    done = run_ctrain("doctor", "--network", "--json", env=box.env, cwd=box.root)
    assert done.returncode in (0, 1), done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert list(checks) == ["rdma", "rdma-view", "nccl-env", "nccl"]
    assert checks["nccl"]["detail"] == advice.NO_GPUS
    assert checks["nccl-env"]["detail"] == "no NCCL network variable set"
