"""README's quick start and the documentation's getting-started tutorial, run as written on the
local Slurm with the real Apptainer: each block's commands, in a fresh directory, with only the
lines that describe the user's cluster (image, nodes, GPUs, cores, memory) set to this machine's.

The image is the CPU SIF built from definitions/ctrain-cpu.def, pushed to the local registry
(`oras://`), as a site would push its copy; `sbatch` waits for the job (a shell function), so the
block's last commands find what the job left. Both blocks share one ctrain cache: the first that
runs pulls the image into it, the other's `ctrain pull "$IMAGE"` finds it up to date.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.helpers import REGISTRY, REPO, need, registry_up
from tests.support.images import ci_cpu_sif_in_registry
from tests.support.real_runs import clean_env, run

pytestmark = [
    pytest.mark.apptainer,
    pytest.mark.docker,
    pytest.mark.slurm,
    pytest.mark.builds("cpu-sif"),
    pytest.mark.timeout(2400),  # the SIF's build the first time, a pull, two epochs on 2 cores
]

RUN_TIMEOUT = 900
WAIT_FOR_JOBS = 'sbatch() { command sbatch --wait "$@"; }\n'
IMAGE_LINE = r"IMAGE=\S+"  # the image line of both blocks: the test's image in its place
# README's line that describes the user's cluster, and this machine's values for it.
CLUSTER_LINE = {r"NODES=\S+ GPUS=\S+ CPUS=\S+ MEM=\S+": "NODES=1 GPUS=0 CPUS=2 MEM=4G"}


def block(path: Path, opening: str) -> str:
    """The fenced code block that ``opening`` (its first lines, up to the fence) opens."""
    text = path.read_text()
    assert opening in text, f"{path} has no {opening!r}"
    return text.split(opening + "\n", 1)[1].split("```", 1)[0]


def for_this_machine(commands: str, lines: dict[str, str]) -> str:
    for pattern, value in lines.items():
        commands, count = re.subn(rf"^{pattern}", value, commands, flags=re.M)
        assert count == 1, f"the block sets {pattern} {count} times:\n{commands}"
    return commands


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ctrain's cache (CTRAIN_CACHE_DIR) for both blocks, empty before the first."""
    return tmp_path_factory.mktemp("cache")


def run_block(commands: str, tmp_path: Path, cache: Path, lines: dict[str, str]) -> Path:
    """Run ``commands`` as a bash script in a fresh directory, with ``cache`` as ctrain's cache;
    that directory. Its `ctrain pull` pulls into an empty cache, and finds the image up to date
    in the cache another block pulled it into."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    image = ci_cpu_sif_in_registry()
    workdir = tmp_path / "work"
    workdir.mkdir()
    script = workdir.parent / "block.sh"
    here = for_this_machine(commands, {IMAGE_LINE: f"IMAGE={image}", **lines})
    script.write_text("set -euo pipefail\n" + WAIT_FOR_JOBS + here)
    pulled = "up to date: " if any(cache.iterdir()) else "pulled "
    env = clean_env(CTRAIN_CACHE_DIR=str(cache), CTRAIN_MIN_FREE_GB="1")
    done = run(["bash", str(script)], env, timeout=RUN_TIMEOUT, cwd=workdir)
    print(done.stdout)
    assert re.search(f"^{pulled}", done.stdout, re.M), done.stdout
    return workdir


def trained(workdir: Path, log_glob: str, mode: str) -> None:
    """The job ran in ``mode`` and left both epochs' checkpoints and TensorBoard's event files
    where the block says: runs/mnist/checkpoints and runs/mnist/logs."""
    out = workdir / "runs" / "mnist"
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert checkpoints == ["epoch-01.weights.h5", "epoch-02.weights.h5"], checkpoints
    assert list((out / "logs").rglob("events.out.tfevents.*"))
    (log,) = workdir.glob(log_glob)
    assert f"ctrain: mode={mode} " in log.read_text(), log.read_text()


def test_readme_quick_start(tmp_path: Path, cache: Path) -> None:
    opening = "<!-- quick start: tests/integration/test_quickstart.py runs this block -->\n```bash"
    workdir = run_block(block(REPO / "README.md", opening), tmp_path, cache, CLUSTER_LINE)
    trained(workdir, "ctrain-multiworker-*.out", "multiworker")


def test_getting_started_tutorial(tmp_path: Path, cache: Path) -> None:
    opening = '```bash title="tutorial"'
    workdir = run_block(block(REPO / "docs" / "getting-started.md", opening), tmp_path, cache, {})
    trained(workdir, "mnist-*.out", "single")
