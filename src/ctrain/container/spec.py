"""What a container run asks for, validated: binds, overlay, environment, GPUs.

Parsing is pure; ``check_paths``, ``job_tmpdir`` and ``pmix_server_dir`` are the places that
look at the filesystem.

What reaches the container, decided on purpose (runtimes that clean the environment, like
apptainer's ``--cleanenv``, drop everything else): the PASSTHROUGH lists; USER and LOGNAME (a
container user keeps its name); TMPDIR when it is a directory (Slurm's per-job one), bound at
the same path. Never: the host's LANG (the image's locale stays unless ``--env LANG=...``) and
HOST_ONLY paths (the image's CUDA counts inside, so ``ctrain launch`` there derives XLA_FLAGS
from the image's CUDA_HOME, not from a host path).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal, NamedTuple

from ctrain.errors import SpecError

Action = Literal["exec", "run", "shell"]

# Variables that reach the container on every runtime (by prefix, or by exact name).
PASSTHROUGH_PREFIXES = (
    "SLURM_",
    "SLURMD_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "NCCL_",
    "HOROVOD_",
    "CUDA_",
    "NVIDIA_",
    "CTRAIN_",
)
# TensorFlow's own variables by name: a TF_ prefix would also catch Terraform's.
PASSTHROUGH_NAMES = (
    "TF_CONFIG",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_VLOG_LEVEL",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_GPU_ALLOCATOR",
    "TF_GPU_THREAD_MODE",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_USE_LEGACY_KERAS",
    "TF_XLA_FLAGS",
    "XLA_FLAGS",
    "OMP_NUM_THREADS",
    "PYTHONUNBUFFERED",
    "TERM",
    "USER",
    "LOGNAME",
)
# Host paths that mean nothing in an image, though their prefix is passed.
HOST_ONLY_NAMES = ("CUDA_HOME", "CUDA_PATH")
ALWAYS = {"PYTHONNOUSERSITE": "1"}  # ~/.local packages never shadow the image's


class Bind(NamedTuple):
    src: str
    dst: str
    mode: Literal["ro", "rw"] = "rw"


class Overlay(NamedTuple):
    path: str
    readonly: bool


@dataclass(frozen=True)
class RunSpec:
    image: str
    action: Action
    command: tuple[str, ...]
    nv: bool = False
    gpus: tuple[str, ...] | None = None  # the GPUs this task may use; None: unknown (all)
    binds: tuple[Bind, ...] = ()
    overlay: Overlay | None = None
    env: dict[str, str] = field(default_factory=dict)  # what the container gets set
    cwd: str = "/"  # where ctrain runs, on the host
    workdir: str | None = None  # the working directory asked for inside (--cwd)
    user: tuple[int, int] | None = None
    tty: bool = False
    fuse: bool = True  # the caller may open /dev/fuse (an unprivileged apptainer mounts with it)


def parse_bind(text: str) -> Bind:
    """``SRC[:DST[:ro|rw]]``. ``SRC:rw`` (a bind onto a directory called rw) is refused."""
    parts = text.split(":")
    if not parts[0] or len(parts) > 3:
        raise SpecError(f"bind {text!r} is not SRC[:DST[:ro|rw]]", "write -B /data:/data:ro")
    src = parts[0]
    if len(parts) == 2 and parts[1] in ("ro", "rw"):
        raise SpecError(
            f"bind {text!r} would mount {src} on a directory called {parts[1]!r}",
            f"write -B {src}:{src}:{parts[1]}",
        )
    dst = parts[1] if len(parts) > 1 and parts[1] else src
    mode = parts[2] if len(parts) == 3 else "rw"
    if mode not in ("ro", "rw"):
        raise SpecError(f"bind {text!r}: mode must be ro or rw, not {mode!r}", "use :ro or :rw")
    if not PurePosixPath(dst).is_absolute():
        raise SpecError(f"bind {text!r}: destination {dst!r} is not absolute", "start it with /")
    return Bind(src, dst, "ro" if mode == "ro" else "rw")


def parse_overlay(text: str) -> Overlay:
    """``FILE[:ro]``."""
    if text.endswith(":ro"):
        return Overlay(text[:-3], True)
    if text.endswith(":rw"):
        return Overlay(text[:-3], False)
    return Overlay(text, False)


def passthrough(environ: Mapping[str, str]) -> dict[str, str]:
    """The host variables that reach the container (Slurm, MPI, NCCL, CUDA, CTRAIN_, ...)."""
    return {
        key: value
        for key, value in environ.items()
        if (key.startswith(PASSTHROUGH_PREFIXES) or key in PASSTHROUGH_NAMES)
        and key not in HOST_ONLY_NAMES
    }


def job_tmpdir(environ: Mapping[str, str]) -> str | None:
    """The host's TMPDIR (under Slurm often a per-job directory) when it is an existing
    absolute directory other than /tmp (which every container has): the container gets it
    bound at the same path and set."""
    tmpdir = environ.get("TMPDIR", "")
    path = PurePosixPath(tmpdir)
    if not path.is_absolute() or path == PurePosixPath("/tmp") or not Path(tmpdir).is_dir():
        return None
    return tmpdir


def pmix_server_dir(environ: Mapping[str, str]) -> str | None:
    """The directory of the PMIx server that started this task (``srun --mpi=pmix``: Slurm puts
    it under SlurmdSpoolDir, /var/spool/slurmd/pmix.JOB.STEP), when it exists: the ranks' PMIx
    clients find the server's shared-memory store there, so it is bound at the same path. A
    container that cannot see it prints "PMIX ERROR ... gds_ds12_lock_pthread.c" in MPI_Init.
    (Open MPI's session directory is elsewhere, in Slurm's TmpFS: docs/apptainer.md.)"""
    directory = environ.get("PMIX_SERVER_TMPDIR", "")
    if not PurePosixPath(directory).is_absolute() or not Path(directory).is_dir():
        return None
    return str(PurePosixPath(directory))


def container_env(
    environ: Mapping[str, str], asked: Mapping[str, str], tmpdir: str | None
) -> dict[str, str]:
    """Passthrough and TMPDIR, then the user's --env/--env-file, then what ctrain always sets."""
    return {**passthrough(environ), **({"TMPDIR": tmpdir} if tmpdir else {}), **asked, **ALWAYS}


def check_paths(binds: Sequence[Bind], overlay: Overlay | None, image_is_file: str | None) -> None:
    """Every bind source, the overlay and a local image must exist before anything starts."""
    for bind in binds:
        if not Path(bind.src).exists():
            raise SpecError(f"bind source {bind.src!r} does not exist", "create it or fix the path")
    if overlay is not None and not Path(overlay.path).is_file():
        raise SpecError(
            f"overlay {overlay.path!r} does not exist",
            "create it: ctrain overlay create PATH --size 15G",
        )
    if image_is_file is not None and not Path(image_is_file).is_file():
        raise SpecError(
            f"image {image_is_file!r} does not exist", "pull it first: ctrain pull -o PATH REF"
        )


def refuse_shared_rw_overlay(overlay: Overlay | None, environ: Mapping[str, str]) -> None:
    """Several tasks of one step writing one overlay corrupt it."""
    tasks = environ.get("SLURM_STEP_NUM_TASKS") or "1"
    if overlay is not None and not overlay.readonly and tasks.isdigit() and int(tasks) > 1:
        raise SpecError(
            f"overlay {overlay.path} read-write in a Slurm step of {tasks} tasks",
            f"mount it read-only: --overlay {overlay.path}:ro",
        )
