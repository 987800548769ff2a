"""Multi-node jobs for real, on the compute hosts cn01..cn03 of `make services NODES=3`
(docs/cluster.md): separate network, hostname and /tmp per host, offline, one slurmd each.

Every rank runs scripts/multinode_probe.py, which reports what TensorFlow or Horovod itself
says about the process (rank, size, local rank), gethostname() and the trained weights. Job files
live in ``cluster_tmp`` (shared by every host; /tmp is not).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import CLUSTER_PARTITION
from tests.support.helpers import CTRAIN
from tests.support.multinode import (
    SRUN,
    STEP_TIMEOUT,
    cluster_env,
    hosts,
    placed,
    probe,
    reports,
    same_weights,
    worker_hosts,
)
from tests.support.real_runs import clean_env, run

pytestmark = [pytest.mark.slurm, pytest.mark.cluster, pytest.mark.tensorflow]

DEAD_PROXY = "http://10.77.0.1:9"  # the login host's bridge address; nothing listens on port 9


@pytest.mark.timeout(3 * STEP_TIMEOUT)
@pytest.mark.parametrize(
    ("distribution", "layout"),
    [
        ("block", [0, 0, 1, 1]),
        ("cyclic", [0, 1, 0, 1]),
        ("block", [0, 0, 1]),  # uneven: Slurm puts 2 + 1
    ],
)
def test_multiworker_across_two_hosts(
    cluster_tmp: Path, distribution: str, layout: list[int]
) -> None:
    tasks = len(layout)
    argv = [*SRUN, "-N", "2", "-n", str(tasks), f"--distribution={distribution}"]
    run(
        [*argv, "--kill-on-bad-exit=1", CTRAIN, "launch", "--", *probe(cluster_tmp)],
        cluster_env(),
        timeout=STEP_TIMEOUT,
    )
    found = reports(cluster_tmp, tasks)
    assert placed(found, layout)  # each rank runs where Slurm put it...
    assert all(worker_hosts(r) == hosts(found) for r in found)  # ...and TF_CONFIG says the same
    assert same_weights(found)
    # One process taking the same global batches (and the learning rate scaled alike) ends
    # with the same weights, up to float rounding.
    run(probe(cluster_tmp / "single", scale=tasks), clean_env(), timeout=STEP_TIMEOUT)
    (single,) = reports(cluster_tmp / "single", 1)
    for got, want in zip(found[0]["weights"], single["weights"], strict=True):
        assert np.allclose(got, want, rtol=1e-4, atol=1e-6), (got, want)


@pytest.mark.timeout(2 * STEP_TIMEOUT)
@pytest.mark.horovod
def test_horovod_srun_pmix_across_two_hosts(cluster_tmp: Path) -> None:
    argv = [*SRUN, "--mpi=pmix", "-N", "2", "-n", "4", "--kill-on-bad-exit=1"]
    run(
        [*argv, CTRAIN, "launch", "--mode", "horovod", "--", *probe(cluster_tmp)],
        cluster_env(),
        timeout=STEP_TIMEOUT,
    )
    found = reports(cluster_tmp, 4)
    assert placed(found, [0, 0, 1, 1])
    assert [r["said"]["local_rank"] for r in found] == [0, 1, 0, 1]
    assert same_weights(found)


def two_node_batch_job(cluster_tmp: Path, line: str) -> None:
    """Run ``line`` as the batch script of a 2-node, 4-task job (sbatch --wait)."""
    script = cluster_tmp / "job.sh"
    script.write_text(f"#!/bin/bash\nset -e\n{line}\n")
    log = cluster_tmp / "job.log"
    done = subprocess.run(
        ["sbatch", "--wait", "-p", CLUSTER_PARTITION, "-N", "2", "-n", "4", "-t", "5",
         "-o", str(log), str(script)],
        env=cluster_env(), capture_output=True, text=True, timeout=STEP_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, log.read_text() if log.exists() else done.stderr


@pytest.mark.timeout(2 * STEP_TIMEOUT)
@pytest.mark.mpi
@pytest.mark.horovod
def test_mpirun_in_a_two_node_batch_job_starts_ranks_on_both(cluster_tmp: Path) -> None:
    command = " ".join([CTRAIN, "launch", "--", *probe(cluster_tmp)])
    two_node_batch_job(cluster_tmp, f"mpirun --allow-run-as-root -np 4 --bind-to none {command}")
    found = reports(cluster_tmp, 4)
    assert placed(found, [0, 0, 1, 1])  # OpenMPI fills each host's slots in turn
    assert [r["said"]["local_rank"] for r in found] == [0, 1, 0, 1]
    assert same_weights(found)


@pytest.mark.timeout(2 * STEP_TIMEOUT)
@pytest.mark.mpich
@pytest.mark.horovod
def test_mpich_hydra_with_proxies_started_by_srun_runs_horovod_on_gloo(cluster_tmp: Path) -> None:
    """MPICH's mpiexec -launcher slurm: srun starts one Hydra proxy per node, so SLURM_PROCID
    counts proxies; ctrain takes the ranks from Hydra's PMI_RANK/MPI_LOCALRANKID, and Horovod
    (built on Open MPI) meets over Gloo at rank 0's rendezvous on the first host."""
    launch = f"{CTRAIN} launch"
    step = (
        f'{launch} --explain --json > "{cluster_tmp}/explain-$PMI_RANK.json" && '
        f"exec {launch} -- {' '.join(probe(cluster_tmp))}"
    )
    two_node_batch_job(cluster_tmp, f"mpiexec.hydra -launcher slurm -n 4 bash -c '{step}'")
    found = reports(cluster_tmp, 4)
    assert placed(found, [0, 0, 1, 1])  # Hydra fills each host's slots in turn
    assert [r["said"]["local_rank"] for r in found] == [0, 1, 0, 1]
    assert same_weights(found)
    plans = [json.loads((cluster_tmp / f"explain-{r}.json").read_text()) for r in range(4)]
    assert {(p["rank_source"], p["mode"], p["world_size"]) for p in plans} == {
        ("hydra", "horovod", 4)
    }
    assert [(p["rank"], p["local_rank"]) for p in plans] == [(0, 0), (1, 1), (2, 0), (3, 1)]
    assert {p["rendezvous"]["addr"] for p in plans} == {hosts(found)[0]}


@pytest.mark.timeout(2 * STEP_TIMEOUT)
@pytest.mark.parametrize(
    ("mode", "srun_mpi"),
    [pytest.param("multiworker", [], id="multiworker"),
     pytest.param("horovod", ["--mpi=pmix"], id="horovod", marks=pytest.mark.horovod)],
)  # fmt: skip
def test_explain_on_three_hosts_agrees_with_tensorflow_and_horovod(
    cluster_tmp: Path, mode: str, srun_mpi: list[str]
) -> None:
    launch = f"{CTRAIN} launch --mode {mode}"
    step = (
        f'{launch} --explain --json > "{cluster_tmp}/explain-$SLURM_PROCID.json" && '
        f"exec {launch} -- {' '.join(probe(cluster_tmp))}"
    )
    argv = [*SRUN, *srun_mpi, "-N", "3", "-n", "4", "--kill-on-bad-exit=1", "bash", "-c", step]
    run(argv, cluster_env(), timeout=STEP_TIMEOUT)
    found = reports(cluster_tmp, 4)
    plans = [json.loads((cluster_tmp / f"explain-{r}.json").read_text()) for r in range(4)]
    assert hosts(found) == ["cn01", "cn01", "cn02", "cn03"]
    for rank, (plan, report) in enumerate(zip(plans, found, strict=True)):
        said = report["said"]
        assert plan["mode"] == mode
        assert plan["hosts"] == ["cn01", "cn02", "cn03"]
        assert (plan["rank"], plan["world_size"]) == (said["rank"], said["size"]) == (rank, 4)
        if mode == "horovod":
            local = (said["local_rank"], said["local_size"])  # Horovod counts per host
            assert (plan["local_rank"], plan["local_size"]) == local
        else:
            assert plan["local_rank"] == int(str(report["slurm_localid"]))
            assert plan["tf_config"] == report["tf_config"]
            assert worker_hosts(report)[rank] == report["host"]
    assert same_weights(found)


@pytest.mark.timeout(2 * STEP_TIMEOUT)
def test_multiworker_with_a_proxy_that_points_nowhere_on_every_host(cluster_tmp: Path) -> None:
    # Proxies kept for the job (CTRAIN_KEEP_PROXIES): only no_proxy keeps gRPC off them.
    proxies = {name: DEAD_PROXY for name in ("http_proxy", "https_proxy", "grpc_proxy")}
    env = cluster_env(CTRAIN_KEEP_PROXIES="1", **proxies)
    run([*SRUN, "-N", "2", "-n", "2", "--kill-on-bad-exit=1", CTRAIN, "launch", "--",
         *probe(cluster_tmp)], env, timeout=STEP_TIMEOUT)  # fmt: skip
    found = reports(cluster_tmp, 2)
    assert placed(found, [0, 1])
    assert same_weights(found)
    for report in found:
        seen = report["proxies"]
        assert {k: seen[k] for k in proxies} == proxies
        assert set(hosts(found)) <= set(seen["no_proxy"].split(","))


@pytest.mark.timeout(2 * STEP_TIMEOUT)
def test_two_two_node_jobs_at_once_sharing_a_host_use_other_ports(cluster_tmp: Path) -> None:
    outs = [cluster_tmp / "a", cluster_tmp / "b"]
    steps = [
        subprocess.Popen(
            [
                *SRUN,
                "-N",
                "2",
                "-n",
                "2",
                "--kill-on-bad-exit=1",
                CTRAIN,
                "launch",
                "--",
                *probe(out),
            ],
            env=cluster_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        for out in outs
    ]
    for step in steps:
        output, _ = step.communicate(timeout=STEP_TIMEOUT)
        assert step.returncode == 0, output
    found = [reports(out, 2) for out in outs]
    assert all(same_weights(f) for f in found)
    assert set(hosts(found[0])) & set(hosts(found[1]))  # 3 hosts: they share one at least
    workers = [set(f[0]["tf_config"]["cluster"]["worker"]) for f in found]
    assert not workers[0] & workers[1]


EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"  # per network namespace: per compute host
TWO_HOSTS = ("cn01", "cn02")


def on_host(host: str, command: str) -> subprocess.CompletedProcess[str]:
    """A shell command in compute host HOST's network namespace (as root)."""
    argv = ["nsenter", f"--net=/run/netns/{host}", "sh", "-c", command]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)


@contextlib.contextmanager
def ephemeral_range(low: int, high: int) -> Iterator[None]:
    """Both hosts' ephemeral port range set to LOW-HIGH, as a site sets it; put back after."""
    before = {host: on_host(host, f"cat {EPHEMERAL}").stdout.split() for host in TWO_HOSTS}
    try:
        for host in TWO_HOSTS:
            on_host(host, f"echo '{low} {high}' >{EPHEMERAL}")
            assert on_host(host, f"cat {EPHEMERAL}").stdout.split() == [str(low), str(high)]
        yield
    finally:
        for host, (old_low, old_high) in before.items():
            on_host(host, f"echo '{old_low} {old_high}' >{EPHEMERAL}")


LOWERED = (9000, 65000)  # a site's range over ctrain's default ports 20000-31999


@pytest.mark.timeout(2 * STEP_TIMEOUT)
def test_ports_keep_clear_of_an_ephemeral_range_lowered_over_them(cluster_tmp: Path) -> None:
    argv = [*SRUN, "-w", ",".join(TWO_HOSTS), "-N", "2", "-n", "2"]
    with ephemeral_range(*LOWERED):
        done = run(
            [*argv, "--kill-on-bad-exit=1", CTRAIN, "launch", "--", *probe(cluster_tmp)],
            cluster_env(),
            STEP_TIMEOUT,
        )
        # A base the user chose is refused on every rank, before the script starts (each rank
        # ends on its own: with --kill-on-bad-exit the first to refuse could kill the other
        # before it says so).
        refused = subprocess.run(
            [*argv, CTRAIN, "launch", "--", *probe(cluster_tmp / "refused")],
            env=cluster_env(CTRAIN_PORT_BASE="20000"),
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
        )
    found = reports(cluster_tmp, 2)
    ports = [int(w.rsplit(":", 1)[1]) for w in found[0]["tf_config"]["cluster"]["worker"]]
    assert all(LOWERED[1] < port <= 65535 for port in ports), ports
    assert same_weights(found)
    assert "moved above it" in done.stderr
    assert refused.returncode != 0
    errors = [line for line in refused.stderr.splitlines() if line.startswith("ctrain: error:")]
    assert (
        errors
        == [
            "ctrain: error: ports 20000-31999 lie in this node's ephemeral port range 9000-65000 "
            "(net.ipv4.ip_local_port_range), where any outgoing connection can take a rank's port "
            "Fix: --port-base 65001 (CTRAIN_PORT_BASE): 512 ports above the range"
        ]
        * 2
    ), refused.stderr
    assert not (cluster_tmp / "refused").exists()
