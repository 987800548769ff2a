"""Every job script ctrain prints is one the real Slurm accepts: ``sbatch --test-only`` (Slurm
parses the script's ``#SBATCH`` lines and plans the allocation, nothing runs) on each mode
rendered by ``ctrain job render``, with GPUs and CPU-only, and on every golden job script.

The test Slurm (scripts/services.sh) is one node with 2 CPUs and 4 GPUs declared as GRES. What
it says, and what is asserted:
- a script that fits the node is accepted, with tasks x cpus-per-task processors;
- more GPUs than the node has are refused (so the GPU line reaches Slurm);
- 2 nodes are refused ("Requested node configuration is not available": --test-only does not
  accept more nodes than exist), and the same script with ``--nodes=1`` on the command line is
  accepted, so the node count is the only thing this cluster cannot give;
- every mode has a golden script with a GPU line, and that line, as written, reaches Slurm (up
  to the node's 4 GPUs accepted, 8 refused).
pyxis scripts too: their --container-* options are srun's, on the step's line inside the
script, so sbatch checks only their #SBATCH lines (the same as on other runtimes).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from ctrain.names import JOB_MODES
from tests.support.helpers import CTRAIN, REPO
from tests.support.job_cases import CASES
from tests.support.real_runs import clean_env

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]

NODE = {"nodes": 1, "cpus": 2, "gpus": 4}  # what scripts/services.sh declares
FITS = ("--cpus-per-task", "1", "--mem", "1G", "--time", "10", "--partition", "debug")
MULTI_PROCESS = ("multiworker", "horovod-srun", "horovod-mpirun")
NOT_AVAILABLE = "Requested node configuration is not available"
ACCEPTED = re.compile(r"sbatch: Job \d+ to start at \S+ using (\d+) processors on nodes vm ")

# (mode, gpus per node, tasks per node or None for one process): all fit one node.
FITTING = [
    *(("single", gpus, None) for gpus in (0, 1)),
    *(("mirrored", gpus, None) for gpus in (0, 1, 2, NODE["gpus"])),
    *((mode, 0, 2) for mode in MULTI_PROCESS),  # CPU-only: 2 ranks on the node's 2 cores
    *((mode, gpus, gpus) for mode in MULTI_PROCESS for gpus in (1, 2)),
]


def slurm_env() -> dict[str, str]:
    """No SBATCH_* variables: they would override the script's lines."""
    return {k: v for k, v in clean_env().items() if not k.startswith(("SBATCH_", "SALLOC_"))}


@pytest.fixture(scope="module", autouse=True)
def _the_test_node() -> None:
    done = subprocess.run(
        ["sinfo", "-h", "-p", "debug", "-o", "%D %c %G"], capture_output=True, text=True, timeout=30
    )
    nodes, cpus, gres = done.stdout.split()
    found = {"nodes": int(nodes), "cpus": int(cpus), "gpus": int(gres.removeprefix("gpu:"))}
    assert found == NODE, "the cases below are written for the Slurm of scripts/services.sh"


def render(tmp_path: Path, mode: str, *options: str) -> Path:
    argv = [CTRAIN, "job", "render", mode, *FITS, *options, "--", "python", "train.py"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=slurm_env())
    assert done.returncode == 0, done.stderr
    script = tmp_path / f"{mode}.sbatch"
    script.write_text(done.stdout)
    return script


def sbatch_test_only(script: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sbatch", "--test-only", *overrides, str(script)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=script.parent,
        env=slurm_env(),
    )


def processors_if_accepted(done: subprocess.CompletedProcess[str]) -> int:
    match = ACCEPTED.search(done.stderr)
    assert done.returncode == 0 and match, f"refused: {done.stderr}"
    return int(match.group(1))


@pytest.mark.parametrize(("mode", "gpus", "tasks"), FITTING)
def test_rendered_script_is_accepted(
    tmp_path: Path, mode: str, gpus: int, tasks: int | None
) -> None:
    options = ["--gpus-per-node", str(gpus)]
    if tasks is not None:
        options += ["--nodes", "1", "--tasks-per-node", str(tasks)]
    script = render(tmp_path, mode, *options)
    assert processors_if_accepted(sbatch_test_only(script)) == (tasks or 1)


def test_more_gpus_than_the_node_has_are_refused(tmp_path: Path) -> None:
    script = render(tmp_path, "mirrored", "--gpus-per-node", str(NODE["gpus"] + 1))
    done = sbatch_test_only(script)
    assert done.returncode != 0 and NOT_AVAILABLE in done.stderr, done.stderr


@pytest.mark.parametrize("mode", MULTI_PROCESS)
@pytest.mark.parametrize("gpus", [0, 1, 2])
def test_two_nodes_refused_only_for_the_node_count(tmp_path: Path, mode: str, gpus: int) -> None:
    tasks = ["--tasks-per-node", "1"] if gpus == 0 else []
    script = render(tmp_path, mode, "--nodes", "2", "--gpus-per-node", str(gpus), *tasks)
    assert "#SBATCH --nodes=2\n" in script.read_text()
    done = sbatch_test_only(script)
    assert done.returncode != 0 and NOT_AVAILABLE in done.stderr, done.stderr
    assert processors_if_accepted(sbatch_test_only(script, "--nodes=1")) == max(gpus, 1)


GOLDEN = sorted((REPO / "tests" / "unit" / "golden" / "jobs").glob("*.sbatch"))
GPU_LINE = re.compile(r"^#SBATCH --gpus-per-node=(\d+)$", re.MULTILINE)
ONE_SMALL_TASK = ("--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=1", "--mem=1G")


@pytest.mark.parametrize("script", GOLDEN, ids=[path.stem for path in GOLDEN])
def test_golden_script_is_accepted_on_a_node_of_this_size(script: Path) -> None:
    """The golden scripts ask for more than this node has: the command line brings the size
    down to one small task; their other lines (time forms, signal, job name, account, output,
    requeue) are Slurm's to accept as written."""
    size = [*ONE_SMALL_TASK, "--partition=debug"]
    if "#SBATCH --gpus-per-node=" in script.read_text():
        size.append("--gpus-per-node=1")
    assert processors_if_accepted(sbatch_test_only(script, *size)) == 1


PYXIS_CASES = [
    (mode, gpus) for mode in ("single", "multiworker", "horovod-srun") for gpus in (0, 1)
]


@pytest.mark.parametrize(("mode", "gpus"), PYXIS_CASES)
def test_pyxis_script_is_accepted(tmp_path: Path, mode: str, gpus: int) -> None:
    """pyxis' --container-* options are srun's, on the step's line inside the script: sbatch
    checks the #SBATCH lines, which are the same as on any other runtime."""
    options = ["--gpus-per-node", str(gpus), "--runtime", "pyxis", "--image", "docker://a.b/c:1"]
    if mode != "single":
        options += ["--nodes", "1", "--tasks-per-node", "1"]
    script = render(tmp_path, mode, *options)
    assert "--container-image=" in script.read_text()
    assert processors_if_accepted(sbatch_test_only(script)) == 1


GPU_GOLDEN = [path for path in GOLDEN if GPU_LINE.search(path.read_text())]


@pytest.mark.parametrize("script", GPU_GOLDEN, ids=[path.stem for path in GPU_GOLDEN])
def test_golden_gpu_line_reaches_slurm_as_written(script: Path) -> None:
    """Each golden script that asks for GPUs (every mode has one), with its own GPU line: the
    node's 4 GPUs (GRES) give up to 4, and more are refused, so Slurm read the number."""
    match = GPU_LINE.search(script.read_text())
    assert match
    done = sbatch_test_only(script, *ONE_SMALL_TASK, "--partition=debug")
    if int(match.group(1)) <= NODE["gpus"]:
        assert processors_if_accepted(done) == 1
    else:
        assert done.returncode != 0 and NOT_AVAILABLE in done.stderr, done.stderr


def test_every_mode_has_a_golden_gpu_script() -> None:
    modes = {CASES[path.stem].mode for path in GPU_GOLDEN}  # the request behind each file
    assert modes == set(JOB_MODES)
