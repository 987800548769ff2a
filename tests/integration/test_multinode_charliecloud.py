"""Real containers across the compute hosts of `make services NODES=3` (docs/cluster.md):
ch-run on cn0x, started by that host's slurmd, runs in that host's network namespace, so each
rank's container is on its own host's address, as on a real cluster.

The image is the CI CPU image converted once on the login host into a cache under /var/tmp
(``charliecloud_image``, shared with test_charliecloud.py); the offline hosts only read it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.charliecloud_image import OUT_DIR, PULL_TIMEOUT, SCRIPT_DIR
from tests.support.helpers import CTRAIN
from tests.support.multinode import (
    PROBE,
    SRUN,
    STEP_TIMEOUT,
    cluster_env,
    hosts,
    placed,
    reports,
    same_weights,
    worker_hosts,
)
from tests.support.real_runs import SCRIPTS, run
from tests.support.slurm_jobs import sh

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.cluster,
    pytest.mark.charliecloud,
    pytest.mark.docker,
    pytest.mark.tensorflow,
    pytest.mark.builds("cpu-image"),
    pytest.mark.timeout(PULL_TIMEOUT + 2 * STEP_TIMEOUT),  # the first waits for the image
]


def slurm_tmpfs_root() -> str:
    """The directory above Slurm's per-node TmpFS (``/tmp/ctrain-cluster/%n`` here,
    scripts/cluster.sh), where slurmstepd makes the PMIx client's temporary directory."""
    config = sh(["scontrol", "show", "config"])
    (tmpfs,) = [line.split("=", 1)[1].strip() for line in config.splitlines() if "TmpFS" in line]
    return tmpfs.split("/%n", 1)[0]


def ch_exec(image: Path, out: Path, *binds: str) -> list[str]:
    """``ctrain exec`` through ch-run of the probe, bound at directories the image has."""
    binds = (*binds, "-B", f"{SCRIPTS}:{SCRIPT_DIR}", "-B", f"{out}:{OUT_DIR}")
    probe = ["python", f"{SCRIPT_DIR}/{PROBE.name}", OUT_DIR, "2"]
    return [CTRAIN, "exec", "--runtime", "charliecloud", *binds, str(image), "--", *probe]


def test_multiworker_through_ch_run_on_two_hosts(
    charliecloud_image: Path, cluster_tmp: Path
) -> None:
    cluster_tmp.chmod(0o755)
    argv = [*SRUN, "-N", "2", "-n", "2", "--kill-on-bad-exit=1"]
    run(
        [*argv, *ch_exec(charliecloud_image, cluster_tmp)],
        cluster_env(USER="root"),
        timeout=STEP_TIMEOUT,
    )
    found = reports(cluster_tmp, 2)
    assert placed(found, [0, 1])  # gethostname() in each container: its own host
    assert all(worker_hosts(r) == hosts(found) for r in found)
    assert same_weights(found)


@pytest.mark.horovod
def test_horovod_pmix_through_ch_run_on_two_hosts(
    charliecloud_image: Path, cluster_tmp: Path
) -> None:
    # The PMIx client's temporary directory is under each host's TmpFS, outside the container
    # unless bound at the same path (on a real cluster TmpFS is /tmp, which ch-run binds).
    cluster_tmp.chmod(0o755)
    tmpfs = slurm_tmpfs_root()
    (charliecloud_image / tmpfs.lstrip("/")).mkdir(parents=True, exist_ok=True)
    argv = [*SRUN, "--mpi=pmix", "-N", "2", "-n", "2", "--kill-on-bad-exit=1"]
    env = cluster_env(CTRAIN_MODE="horovod", USER="root")  # ch-run needs it
    step = ch_exec(charliecloud_image, cluster_tmp, "-B", f"{tmpfs}:{tmpfs}")
    run([*argv, *step], env, timeout=STEP_TIMEOUT)
    found = reports(cluster_tmp, 2)
    assert placed(found, [0, 1])
    assert [r["said"]["local_rank"] for r in found] == [0, 0]
    assert same_weights(found)
