"""The names that travel between modules and processes, each defined once.

Distributed modes, collectives and bench launchers; container runtimes; the variables ``ctrain
launch`` hands the training script. (Image references and their schemes: ``references``.)
Every other module derives its lists from these. Imports nothing heavy: the CLI reads its
choices from here.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Mapping
from typing import Literal, NamedTuple, get_args

from ctrain.errors import LaunchError

AUTO = "auto"  # "let ctrain decide": the first choice of every setting below

# ---- distributed modes ----------------------------------------------------------------------


class Mode(str, enum.Enum):
    SINGLE = "single"
    MIRRORED = "mirrored"
    MULTIWORKER = "multiworker"
    HOROVOD = "horovod"


ONE_PROCESS = (Mode.SINGLE, Mode.MIRRORED)
MULTI_PROCESS = (Mode.MULTIWORKER, Mode.HOROVOD)
# What asks a training process to stop after its step, with a checkpoint (train/stopping.py): the
# time limit's warning the job scripts ask for, and what Slurm sends when it ends a job otherwise.
STOP_SIGNALS = (signal.SIGUSR2, signal.SIGTERM)
MODE_CHOICES = (AUTO, *(mode.value for mode in Mode))

# The job templates (jobs/<name>.sbatch): one per mode, Horovod's twice, started by srun or mpirun.
JOB_MODES = (
    *(mode.value for mode in Mode if mode is not Mode.HOROVOD),
    *(f"{Mode.HOROVOD.value}-{starter}" for starter in ("srun", "mpirun")),
)
ONE_NODE_JOB_MODES = tuple(mode.value for mode in ONE_PROCESS)

COLLECTIVES = ("nccl", "ring")
COLLECTIVE_CHOICES = (AUTO, *COLLECTIVES)

KERAS_2, KERAS_3 = "2", "3"  # CTRAIN_KERAS: tf-keras or Keras 3 (auto: launch.keras.legacy_keras)
KERAS_CHOICES = (AUTO, KERAS_2, KERAS_3)
TUNE_OFF = "off"  # ctrain launch sets no thread or polling defaults (launch/tuning.py)
TUNE_CHOICES = (AUTO, TUNE_OFF)

BENCH_LAUNCHERS = ("srun", "mpirun", "local")  # what starts ctrain bench's workers
BENCH_LAUNCHER_CHOICES = (AUTO, *BENCH_LAUNCHERS)
ProgressMode = Literal["bar", "lines", "off"]  # what pulls, pushes and builds show (util.progress)
PROGRESS_MODES: tuple[ProgressMode, ...] = get_args(ProgressMode)
PROGRESS_CHOICES = (AUTO, *PROGRESS_MODES)

# ---- container runtimes ---------------------------------------------------------------------

SIF_RUNTIMES = ("apptainer", "singularity")  # run SIF files; pull to a file in the cache
CHARLIECLOUD = "charliecloud"  # ch-run: an image directory ctrain pulls into the cache
# In a Charliecloud image directory: the image's own variables (written by ch-convert, ch-image and
# ctrain's pull, read by its exec)
CH_ENV_FILE = "ch/environment"
ENGINE_RUNTIMES = ("docker", "podman")  # keep images in their own store
DOCKER = ENGINE_RUNTIMES[0]  # the engine ctrain reaches through its API (images.docker_api)
# In the order auto tries them (docs/charliecloud.md: the unprivileged HPC runtimes first).
CONTAINER_RUNTIMES = (*SIF_RUNTIMES, CHARLIECLOUD, *ENGINE_RUNTIMES)
PYXIS = "pyxis"  # srun's --container-* options (enroot underneath); never chosen by auto
# Those that run a local copy ctrain pulls into its cache for a remote image.
CACHED_RUNTIMES = (*SIF_RUNTIMES, CHARLIECLOUD, PYXIS)
PROGRAMS = {CHARLIECLOUD: "ch-run", PYXIS: "srun"}  # a runtime's program not named after it
HOST = "host"  # no container: the current environment
RUNTIMES = (*CONTAINER_RUNTIMES, PYXIS, HOST)
RUNTIME_CHOICES = (AUTO, *RUNTIMES)


def program_of(runtime: str) -> str:
    """The program ``runtime`` is started by (looked up on PATH)."""
    return PROGRAMS.get(runtime, runtime)


# ---- what ctrain launch hands the training script -------------------------------------------
# Launch outputs, never settings: a setting (CTRAIN_MODE, CTRAIN_COLLECTIVE, ...) is what was
# asked, these are what was decided, so a nested launch cannot take one for the other.

ENV_LAUNCH_MODE = "CTRAIN_LAUNCH_MODE"
ENV_RANK = "CTRAIN_RANK"
ENV_WORLD_SIZE = "CTRAIN_WORLD_SIZE"
ENV_LOCAL_RANK = "CTRAIN_LOCAL_RANK"
ENV_LOCAL_SIZE = "CTRAIN_LOCAL_SIZE"
ENV_LAUNCH_COLLECTIVE = "CTRAIN_LAUNCH_COLLECTIVE"
ENV_LAUNCH_COLLECTIVE_TIMEOUT = "CTRAIN_LAUNCH_COLLECTIVE_TIMEOUT"
# Set by the carried launcher's boot.sh (container/carry.py): its interpreter, how it was found
ENV_CARRIED = "CTRAIN_CARRIED"
# HOST:PORT of rank 0's peer-loss watch, where the ranks watch each other (launch/peers.py)
ENV_LAUNCH_PEER_WATCH = "CTRAIN_LAUNCH_PEER_WATCH"
ENV_LAUNCH_PROFILE = "CTRAIN_LAUNCH_PROFILE"  # the traced steps, FIRST-LAST (launch/profile.py)
ENV_LAUNCH_PROFILE_RUN = "CTRAIN_LAUNCH_PROFILE_RUN"  # the run's profile directory, absolute
ENV_LAUNCH_PROFILE_TRACE = "CTRAIN_LAUNCH_PROFILE_TRACE"  # 1: this rank writes a trace


class Profiled(NamedTuple):
    """What ``ctrain launch --profile`` decided for this process, as the script reads it: the
    traced steps (FIRST-LAST), the run's profile directory (absolute), whether it traces."""

    steps: str
    run: str
    trace: bool

    def to_env(self) -> dict[str, str]:
        return {
            ENV_LAUNCH_PROFILE: self.steps,
            ENV_LAUNCH_PROFILE_RUN: self.run,
            ENV_LAUNCH_PROFILE_TRACE: "1" if self.trace else "0",
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Profiled | None:
        """The launch's profile, or None when it traces nothing in this process."""
        steps = environ.get(ENV_LAUNCH_PROFILE)
        if not steps or ENV_LAUNCH_PROFILE_RUN not in environ:
            return None
        trace = environ.get(ENV_LAUNCH_PROFILE_TRACE) == "1"
        return cls(steps, environ[ENV_LAUNCH_PROFILE_RUN], trace)


class Launched(NamedTuple):
    """What ``ctrain launch`` decided for this process, as the script reads it."""

    mode: Mode
    rank: int
    size: int
    local_rank: int
    local_size: int
    collective: str
    collective_timeout: int

    def to_env(self) -> dict[str, str]:
        return {
            ENV_LAUNCH_MODE: self.mode.value,
            ENV_RANK: str(self.rank),
            ENV_WORLD_SIZE: str(self.size),
            ENV_LOCAL_RANK: str(self.local_rank),
            ENV_LOCAL_SIZE: str(self.local_size),
            ENV_LAUNCH_COLLECTIVE: self.collective,
            ENV_LAUNCH_COLLECTIVE_TIMEOUT: str(self.collective_timeout),
        }

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Launched | None:
        """The launch's decisions, or None when ctrain launch did not start this process."""
        if ENV_LAUNCH_MODE not in environ:
            return None
        try:
            return cls(
                mode=Mode(environ[ENV_LAUNCH_MODE]),
                rank=int(environ[ENV_RANK]),
                size=int(environ[ENV_WORLD_SIZE]),
                local_rank=int(environ[ENV_LOCAL_RANK]),
                local_size=int(environ[ENV_LOCAL_SIZE]),
                collective=environ[ENV_LAUNCH_COLLECTIVE],
                collective_timeout=int(environ[ENV_LAUNCH_COLLECTIVE_TIMEOUT]),
            )
        except (KeyError, ValueError) as exc:
            raise LaunchError(
                f"incomplete or malformed CTRAIN_* launch variables ({exc})",
                f"start the script with ctrain launch, or unset {ENV_LAUNCH_MODE}",
            ) from exc
