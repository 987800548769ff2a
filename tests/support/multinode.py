"""What the tests on the compute hosts cn01..cn03 of `make services NODES=3` share
(docs/cluster.md): OpenMPI on the hosts' network, srun on their partition, and
tests/scripts/multinode_probe.py, which every rank runs to report what TensorFlow or Horovod itself
says about the process (rank, size, local rank), gethostname() and the trained weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import CLUSTER_PARTITION
from tests.support.real_runs import BIN, SCRIPTS, clean_env

PROBE = SCRIPTS / "multinode_probe.py"
SUBNET = "10.77.0.0/24"  # scripts/cluster.sh: the compute hosts' only network
OPENMPI_ON_THE_CLUSTER = {
    "OMPI_MCA_oob_tcp_if_include": SUBNET,
    "OMPI_MCA_btl_tcp_if_include": SUBNET,
}
SRUN = ["srun", "-p", CLUSTER_PARTITION, "-t", "5"]
STEP_TIMEOUT = 240  # seconds for one training step of up to 4 ranks on the 2 shared cores


def cluster_env(**extra: str) -> dict[str, str]:
    """clean_env with OpenMPI on the cluster's network instead of loopback."""
    return clean_env(**OPENMPI_ON_THE_CLUSTER, **extra)


def probe(out: Path, epochs: int = 2, scale: int = 1) -> list[str]:
    return [str(BIN / "python"), str(PROBE), str(out), str(epochs), str(scale)]


def reports(out: Path, size: int) -> list[dict[str, Any]]:
    """Each rank's report, by the rank TensorFlow or Horovod gave it."""
    found = [json.loads((out / f"rank{r}.json").read_text()) for r in range(size)]
    assert [r["said"]["rank"] for r in found] == list(range(size))
    assert {r["said"]["size"] for r in found} == {size}
    return found


def hosts(found: list[dict[str, Any]]) -> list[str]:
    return [str(r["host"]) for r in found]


def placed(found: list[dict[str, Any]], layout: list[int]) -> bool:
    """Rank r ran on the job's node layout[r] (Slurm picks which hosts; it orders them by name)."""
    nodes = sorted(set(hosts(found)))
    return hosts(found) == [nodes[i] for i in layout] and len(nodes) == max(layout) + 1


def same_weights(found: list[dict[str, Any]]) -> bool:
    return all(r["weights"] == found[0]["weights"] for r in found)


def worker_hosts(report: dict[str, Any]) -> list[str]:
    workers = report["tf_config"]["cluster"]["worker"]
    return [w.rsplit(":", 1)[0] for w in workers]
