"""Containers across the compute hosts of `make services NODES=3` (docs/cluster.md) through the
Apptainer stand-in (tests/fake_apptainer.py), which runs each command for real on the host it is
started on. The compute hosts are offline for real: inside their network namespaces
127.0.0.1:5000 is their own loopback, where no registry listens, so the stand-in's fetch of a
``docker://127.0.0.1:5000/...`` image fails there as Apptainer's would (no FAKE_APPTAINER_OFFLINE
needed). The login host (this namespace) reaches the registry.

- An image pulled once on the login host (``ctrain pull``) runs on two offline hosts through
  jobs/multiworker.sbatch: ``ctrain resolve`` in the batch step reuses the pull's record, every
  rank execs the one SIF file on the shared filesystem, one download in all.
- The same image not pulled first: the batch step's pull fails with ctrain's one-line error and
  fix, and no rank starts.
- ``srun --mpi=pmix -N 2 ctrain exec IMAGE.sif`` in horovod mode across two hosts.

Every file the hosts share (the stand-in, its log, ctrain's cache, the job's files) lives in
``cluster_tmp``; /tmp is private to each host.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ctrain.images import pull, sif
from tests import fake_apptainer
from tests.conftest import CLUSTER_SHARED_TMP

from .jobs import BIN
from .test_apptainer_jobs import StandIn, image_env, remote_image, sbatch
from .test_jobs_real import RESUMABLE, final_weights, lines, log, render, sh, wait_done
from .test_multinode import SRUN, STEP_TIMEOUT, placed, probe, reports, same_weights
from .test_multinode_jobs import NODES, OPENMPI_ON_THE_CLUSTER

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.cluster,
    pytest.mark.docker,
    pytest.mark.tensorflow,
    pytest.mark.timeout(2 * STEP_TIMEOUT),
]
__all__ = ["remote_image"]  # a fixture of test_apptainer_jobs.py
LOGIN_HOST = os.uname().nodename
FAIL_TIMEOUT = 90  # seconds for a job whose batch step fails at its first command


def cluster_standin(root: Path, **extra: str) -> tuple[StandIn, dict[str, str]]:
    """The stand-in under ``root`` (shared by every host) and a job environment for the
    cluster: apptainer, OpenMPI on the cluster's network."""
    assert root.is_relative_to(CLUSTER_SHARED_TMP)
    standin = StandIn(root)
    env = standin.env(CTRAIN_RUNTIME="apptainer", **OPENMPI_ON_THE_CLUSTER, **extra)
    return standin, env


def execs(standin: StandIn) -> list[dict[str, object]]:
    return [c for c in standin.calls() if "container" in c]


def node_names(nodelist: str) -> list[str]:
    return sh(["scontrol", "show", "hostnames", nodelist]).split()


def submit_multiworker(image: str, root: Path, env: dict[str, str], jobs: list[str]) -> str:
    command = ["python", str(RESUMABLE), str(root / "out"), "2"]
    script = root / "job.sbatch"
    script.write_text(
        render("multiworker", command, runtime="apptainer", image=image, job_name="2n-sif", **NODES)
    )
    return sbatch(script, env, root, jobs)


def test_image_pulled_on_the_login_host_runs_on_two_offline_hosts(
    remote_image: str, cluster_tmp: Path, jobs_to_cancel: list[str]
) -> None:
    standin, env = cluster_standin(cluster_tmp)
    done = subprocess.run(
        [str(BIN / "ctrain"), "pull", remote_image],
        env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT, cwd=cluster_tmp,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = submit_multiworker(remote_image, cluster_tmp, env, jobs_to_cancel)
    record = wait_done(job, cluster_tmp, timeout=STEP_TIMEOUT)
    assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0", log(cluster_tmp)
    assert record["NumNodes"] == "2", record
    runs = lines(cluster_tmp / "out" / "runs.jsonl")
    assert sorted(r["rank"] for r in runs) == [0, 1]  # type: ignore[type-var]
    assert all(r["end"] == "done" and r["mode"] == "multiworker" for r in runs), runs
    first, second = final_weights(cluster_tmp / "out", 2)
    assert first == second
    # One download, the login host's; no pull on the compute hosts.
    assert [(d["ref"], d["host"]) for d in standin.downloads()] == [(remote_image, LOGIN_HOST)]
    pulls = [c for c in standin.calls() if c.get("argv", [""])[0] == "pull"]  # type: ignore[index]
    assert [c["host"] for c in pulls] == [LOGIN_HOST]
    # Each rank ran the one local SIF file, on the shared filesystem, on its own host.
    local = standin.cache / sif.IMAGES_DIR / pull.image_filename(remote_image)
    assert local.is_relative_to(CLUSTER_SHARED_TMP) and local.is_file()
    ran = execs(standin)
    assert [c["container"]["image"] for c in ran] == [str(local)] * 2  # type: ignore[index]
    assert sorted(str(c["host"]) for c in ran) == node_names(record["NodeList"])


def test_image_not_pulled_fails_in_the_batch_step_with_the_fix(
    remote_image: str, cluster_tmp: Path, jobs_to_cancel: list[str]
) -> None:
    standin, env = cluster_standin(cluster_tmp)
    job = submit_multiworker(remote_image, cluster_tmp, env, jobs_to_cancel)
    record = wait_done(job, cluster_tmp, timeout=FAIL_TIMEOUT)
    text = log(cluster_tmp, tail=0)
    assert record["JobState"] == "FAILED" and record["ExitCode"] != "0:0", text
    errors = [line for line in text.splitlines() if line.startswith("ctrain: error:")]
    assert len(errors) == 1 and "Connection refused" in errors[0], text  # offline for real
    assert f"pull it once on a login node, ctrain pull {remote_image}," in errors[0]
    assert "Traceback" not in text
    assert not execs(standin) and not standin.downloads(), standin.calls()  # no rank started
    assert not (cluster_tmp / "out").exists()
    pulls = [c for c in standin.calls() if c.get("argv", [""])[0] == "pull"]  # type: ignore[index]
    assert [c["host"] for c in pulls] == node_names(record["NodeList"])[:1], pulls  # batch host


@pytest.mark.horovod
def test_horovod_through_pmix_runs_a_sif_file_on_two_hosts(cluster_tmp: Path) -> None:
    standin, env = cluster_standin(cluster_tmp, CTRAIN_MODE="horovod")
    image = cluster_tmp / "img.sif"
    fake_apptainer.make_sif(image, image_env())
    out = cluster_tmp / "out"
    argv = [*SRUN, "--mpi=pmix", "-N", "2", "-n", "2", "--kill-on-bad-exit=1"]
    done = subprocess.run(
        [*argv, str(BIN / "ctrain"), "exec", str(image), "--", *probe(out)],
        env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT, cwd=cluster_tmp,
    )  # fmt: skip
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    found = reports(out, 2)
    assert placed(found, [0, 1])
    assert [r["said"]["local_rank"] for r in found] == [0, 0]
    assert same_weights(found)
    ran = execs(standin)
    assert [c["container"]["image"] for c in ran] == [str(image)] * 2  # type: ignore[index]
    assert sorted(str(c["host"]) for c in ran) == sorted({str(r["host"]) for r in found})
