"""``ctrain doctor --network`` for real on the compute hosts cn01..cn03 (docs/cluster.md): two
tasks on two hosts of a real Slurm step, each writing its JSON to a shared directory.

These hosts have neither GPUs nor RDMA devices: each task must say so (no RDMA devices, sockets
are all there is; no GPUs: NCCL not checked) and finish well within the timeout. NCCL's parser
and the advice are tested on NCCL's own log formats in tests/unit/network/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CLUSTER_PARTITION
from tests.support.helpers import CTRAIN
from tests.support.real_runs import clean_env, run

pytestmark = [pytest.mark.slurm, pytest.mark.cluster]

STEP_TIMEOUT = 120  # seconds: the check reads files and lists GPUs, it trains nothing


@pytest.mark.timeout(2 * STEP_TIMEOUT)
def test_doctor_network_on_two_cpu_hosts(cluster_tmp: Path) -> None:
    out = cluster_tmp / "doctor-%t.json"
    argv = ["srun", "-p", CLUSTER_PARTITION, "-t", "2", "-N", "2", "-n", "2", f"--output={out}"]
    run([*argv, CTRAIN, "doctor", "--network", "--json"], clean_env(), timeout=STEP_TIMEOUT)
    for task in (0, 1):
        data = json.loads((cluster_tmp / f"doctor-{task}.json").read_text())
        checks = {c["name"]: c for c in data["checks"]}
        assert list(checks) == ["rdma", "rdma-view", "nccl-env", "nccl"]
        assert checks["rdma"]["status"] == "WARN"
        assert checks["rdma"]["detail"].startswith("no RDMA devices"), checks["rdma"]
        assert "NCCL_SOCKET_IFNAME" in checks["rdma"]["fix"]
        assert checks["rdma-view"]["detail"].startswith("no active RDMA device to see")
        assert checks["nccl"] == {
            "name": "nccl",
            "status": "WARN",
            "detail": "no GPUs: NCCL not checked",
            "fix": "run it on GPU nodes: srun --gpus-per-node=N ctrain exec --nv IMAGE -- ...",
        }
        assert data["summary"]["failed"] is False
