"""``--profile STEPS``: which steps and ranks trace, and where a run's files go (pure).

Steps count from 1, as Keras numbers batches over the whole run (not per epoch). A window is
``FIRST-LAST`` or one step ``N``; the first step traces and compiles the graph, so it is never
traced. One directory per run (``run_name``) under the profile directory:

    RUN/rank-R/plugins/profile/TIME/HOST.xplane.pb   TensorFlow's trace (ranks that trace)
    RUN/horovod-timeline.json                        Horovod's timeline (rank 0, Horovod mode)
    RUN/steps/rank-R.json                            every rank's own timing of the window
    RUN/breakdown.txt                                the chief's table (train/breakdown.py)

By default the chief and the last rank trace (on another node when there are several): a
run of 256 ranks writes two traces, not 256; under MultiWorkerMirroredStrategy the chief only
(``traced_ranks``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import NamedTuple

from ctrain.errors import LaunchError
from ctrain.names import Mode, Profiled
from ctrain.profile_window import ALL_RANKS, AUTO_RANKS, StepWindow, check_ranks


def traced_ranks(spec: str, size: int, mode: Mode) -> frozenset[int]:
    """The ranks that write a trace, of ``size`` ranks in ``mode``.

    Under MultiWorkerMirroredStrategy only the chief traces: TensorFlow 2.21's profiler
    aborted another worker as it stopped ("double free or corruption" in
    ``tf.profiler.experimental.stop``) in about one run of nine here, the chief never."""
    chief_only = mode is Mode.MULTIWORKER
    if spec == AUTO_RANKS:
        return frozenset({0} if chief_only else {0, size - 1})
    ranks = frozenset(range(size)) if spec == ALL_RANKS else _listed(spec, size)
    if chief_only and ranks != {0}:
        raise LaunchError(
            f"--profile-ranks {spec} in multiworker mode: TensorFlow's profiler can abort a "
            "worker other than the chief as it stops (docs/profiling.md)",
            "--profile-ranks auto (the chief) in multiworker mode; every rank times its steps",
        )
    return ranks


def _listed(spec: str, size: int) -> frozenset[int]:
    ranks = frozenset(int(item) for item in check_ranks(spec).split(","))
    beyond = sorted(rank for rank in ranks if rank >= size)
    if beyond:
        raise LaunchError(
            f"--profile-ranks {spec}: rank {beyond[0]} of a run of {size}",
            f"name ranks below {size}, or --profile-ranks auto",
        )
    return ranks


class Process(NamedTuple):
    """Where and as what the launching process runs: its working directory and ids."""

    cwd: str
    pid: int
    ppid: int


def run_name(environ: Mapping[str, str], size: int, pid: int, ppid: int) -> str:
    """A name every rank of one run computes alike: Slurm's job and step, else the MPI job's
    namespace, else the launcher's process on this node (ranks of one node share their
    parent), else this process for a run of one."""
    job, step = environ.get("SLURM_JOB_ID"), environ.get("SLURM_STEP_ID")
    if job:
        return f"job{job}.{step}" if step else f"job{job}"
    namespace = environ.get("PMIX_NAMESPACE") or environ.get("OMPI_MCA_ess_base_jobid")
    if namespace:
        return "mpi-" + re.sub(r"[^A-Za-z0-9_.-]", "_", namespace)
    return f"pid{pid}" if size == 1 else f"ppid{ppid}"


def profiled(
    window: StepWindow,
    ranks: str,
    directory: str,
    mode: Mode,
    rank: int,
    size: int,
    environ: Mapping[str, str],
    process: Process,
) -> Profiled:
    """What a rank's training script needs to trace: the window, its run directory (absolute,
    so a script that changes directory writes to the same place), whether this rank traces."""
    run = os.path.join(process.cwd, directory, run_name(environ, size, process.pid, process.ppid))
    trace = rank in traced_ranks(ranks, size, mode)
    return Profiled(str(window), os.path.normpath(run), trace)


def profile_environment(
    decided: Profiled, mode: Mode, environ: Mapping[str, str]
) -> dict[str, str]:
    """``decided`` as the launch hands it over, and Horovod's dynamic timeline (started and
    stopped at the window's edges)."""
    env = decided.to_env()
    if mode is Mode.HOROVOD and "HOROVOD_TIMELINE" not in environ:
        env["HOROVOD_TIMELINE"] = "DYNAMIC"
    return env
