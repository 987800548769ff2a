"""The environment case each engine runtime's real exec test runs (docker, podman): what
reaches the container from the host, from an ``--env`` pair and from an ``--env-file``, and
what does not."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.real_runs import clean_env

SCRIPT = "import json, os; print(json.dumps(dict(os.environ)))"  # run with python3 -c
ARRIVES = {
    "SLURM_JOB_ID": "123",
    "NCCL_DEBUG": "INFO",
    "HOROVOD_CYCLE_TIME": "5",
    "CTRAIN_QUIET": "1",
    "CUDA_CACHE_DISABLE": "1",
    "ASKED": "a,b",
    "FROM_FILE": "two words",
    "PYTHONNOUSERSITE": "1",
}
# The host's values that must not arrive (a runtime may set the name itself: Apptainer puts
# LD_LIBRARY_PATH=/.singularity.d/libs in every container).
STAYS_OUT = {"PYTHONPATH": "/leak", "LD_LIBRARY_PATH": "/leak", "SECRET": "no"}


def case(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    """The exec options (before the image) and the host environment of the case."""
    env_file = tmp_path / "vars.env"
    env_file.write_text("# site settings\nFROM_FILE=two words\n")
    env = clean_env(
        SLURM_JOB_ID="123",
        NCCL_DEBUG="INFO",
        HOROVOD_CYCLE_TIME="5",
        CTRAIN_QUIET="1",
        CUDA_CACHE_DISABLE="1",
        **STAYS_OUT,
    )
    return ["--no-launch", "--env", "ASKED=a,b", "--env-file", str(env_file)], env


def check(stdout: str) -> None:
    """SCRIPT's output: every ARRIVES value inside, none of the host's STAYS_OUT values."""
    inside = json.loads(stdout)
    for key, value in ARRIVES.items():
        assert inside.get(key) == value, key
    for key, value in STAYS_OUT.items():
        assert value not in inside.get(key, ""), key
