"""Real checks of the services scripts/services.sh starts: Slurm (srun, PMIx, sbatch) and the
local Docker registry. Skipped outside CI when a service is missing, failed with CI=true.

Environment facts, measured on the one-node cluster services.sh configures (slurm-wlm 22.05.8,
PMIx 4.2.2, OpenMPI 4.1.4), `env | grep -E 'SLURM|PMI|OMPI'`:

(a) sbatch -n 2 batch script: SLURM_JOB_ID/SLURM_JOBID, SLURM_JOB_NAME, SLURM_JOB_NODELIST,
    SLURM_NODELIST, SLURM_JOB_NUM_NODES, SLURM_NNODES, SLURM_NTASKS=2, SLURM_NPROCS=2,
    SLURM_TASKS_PER_NODE=2, SLURM_JOB_CPUS_PER_NODE, SLURM_CPUS_ON_NODE, SLURM_NODEID=0,
    SLURM_PROCID=0, SLURM_LOCALID=0, SLURM_GTIDS=0, SLURM_TASK_PID, SLURMD_NODENAME,
    SLURM_JOB_PARTITION, SLURM_SUBMIT_DIR/HOST, SLURM_CONF, SLURM_CLUSTER_NAME,
    SLURM_JOB_UID/GID/USER.
    NOT set: SLURM_STEP_ID, SLURM_STEPID, SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST,
    SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NUM_NODES, and no PMI*/PMIX*/OMPI* at all.
    So SLURM_PROCID=0 exists outside any step; SLURM_STEP_ID tells a step apart.
(b) srun -n 2 step (MpiDefault=none): all of (a) plus SLURM_STEP_ID=SLURM_STEPID,
    SLURM_STEP_NUM_TASKS=2, SLURM_STEP_NUM_NODES=1, SLURM_STEP_NODELIST,
    SLURM_STEP_TASKS_PER_NODE=2, SLURM_PROCID=0/1, SLURM_LOCALID=0/1, SLURM_GTIDS=0,1,
    SLURM_DISTRIBUTION, SLURM_SRUN_COMM_HOST/PORT, SLURM_STEP_LAUNCHER_PORT,
    SLURM_LAUNCH_NODE_IPADDR, SLURM_UMASK; no PMI* variables.
    srun --mpi=pmix adds SLURM_MPI_TYPE=pmix, PMIX_RANK=0/1, PMIX_NAMESPACE, PMIX_SERVER_URI*,
    PMIX_VERSION, ... (no PMIX_SIZE).
(c) mpirun -np 2 inside an sbatch -n 2 allocation: ranks get OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK
    and PMIX_RANK, but inherit the batch script's SLURM_* unchanged: both ranks see SLURM_PROCID=0.
    Inside salloc there is no SLURM_PROCID at all. Full listings: /tmp/slurm-env-facts.txt.
"""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import pytest

TIMEOUT = 120  # seconds for every subprocess: a hung Slurm must fail the test, not the CI job
SRUN2 = ["srun", "-n", "2", "-t", "1"]


def run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=TIMEOUT, check=False, cwd=cwd
    )


def lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.strip())


@pytest.mark.slurm
def test_srun_two_tasks_have_ranks_0_and_1() -> None:
    proc = run([*SRUN2, "bash", "-c", 'echo "$SLURM_PROCID $SLURM_STEP_NUM_TASKS"'])
    assert proc.returncode == 0, proc.stderr
    assert lines(proc.stdout) == ["0 2", "1 2"]


@pytest.mark.slurm
def test_srun_pmix_sets_pmix_rank() -> None:
    proc = run([*SRUN2, "--mpi=pmix", "bash", "-c", 'echo "$PMIX_RANK $SLURM_MPI_TYPE"'])
    assert proc.returncode == 0, proc.stderr
    assert lines(proc.stdout) == ["0 pmix", "1 pmix"]


@pytest.mark.slurm
def test_sbatch_wait_returns_the_scripts_exit_code(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n"
        # In the batch script: SLURM_PROCID is 0, but no step variables (see the facts above).
        'echo "procid=$SLURM_PROCID ntasks=$SLURM_NTASKS step=${SLURM_STEP_ID-unset}"\n'
        "exit 3\n"
    )
    out = tmp_path / "job.out"
    argv = ["sbatch", "--wait", "-n", "2", "-t", "1", "-o", str(out), str(script)]
    proc = run(argv, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert out.read_text().strip() == "procid=0 ntasks=2 step=unset"


# A task of job NAME marks that it runs, then waits (at most 60 s) until both tasks of job OTHER
# have marked theirs: both jobs succeed only if they were running at the same time.
OVERLAP = """
touch "$DIR/$NAME.$SLURM_PROCID"
for _ in $(seq 600); do
    [ -e "$DIR/$OTHER.0" ] && [ -e "$DIR/$OTHER.1" ] && { echo ok; exit 0; }
    sleep 0.1
done
echo "job $OTHER never ran while job $NAME did" >&2
exit 1
"""


@pytest.mark.slurm
def test_two_2_task_jobs_run_at_once_on_the_node(tmp_path: Path) -> None:
    # OverSubscribe=FORCE:4: two 2-task jobs share the 2 cores, so they overlap.
    procs = [
        subprocess.Popen(
            [*SRUN2, "--immediate=30", "--export", f"ALL,DIR={tmp_path},NAME={a},OTHER={b}"]
            + ["bash", "-c", OVERLAP],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a, b in (("a", "b"), ("b", "a"))
    ]
    results = [p.communicate(timeout=TIMEOUT) for p in procs]
    for proc, (stdout, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0, stderr
        assert lines(stdout) == ["ok", "ok"]


@pytest.mark.docker
def test_local_registry_answers_on_loopback() -> None:
    # No proxies: the registry is on 127.0.0.1 and nothing may go elsewhere.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open("http://127.0.0.1:5000/v2/", timeout=30) as response:
        assert response.status == 200
        assert response.headers.get("Docker-Distribution-Api-Version") == "registry/2.0"
