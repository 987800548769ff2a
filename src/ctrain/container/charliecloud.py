"""Charliecloud (``ch-run``): argv and environment for an image directory.

ch-run is unprivileged (user namespaces, no daemon, no setuid helper) and stays in the caller's
network namespace, so a container on a compute node is on that node's network. What ctrain
relies on, from ch-run 0.31's manual (pinned by tests/integration/test_charliecloud.py):

- The image is a directory, mounted read-only. A bind ``-b SRC:DST`` needs DST to exist in the
  image (only ``--write`` creates it, which would change a shared image: ctrain never asks for
  it); ctrain checks every destination before launch. Binds have no read-only mode.
- The caller's environment passes into the container unchanged, except that ch-run unsets
  TMPDIR (the host's $TMPDIR, or /tmp, is bound at the container's /tmp), sets CH_RUNNING, and
  applies ``--unset-env`` and ``--set-env`` in the order given. ctrain gives the ch-run process
  the container's exact environment (the image's own variables from ``IMAGE/ch/environment``,
  then the ones ``container.spec`` chooses for every runtime) and one
  ``--unset-env='!(NAME|...)'`` (an extglob) that removes everything else: values travel in the
  environment, never on the command line, so none is quoted, expanded or shown by ps.
- ch-run refuses to start without USER. It execs the command (same pid): signals reach it and
  its exit status is the container's.
- Under ``srun --mpi=pmix`` the PMIx server's shared-memory store is in slurmd's spool, outside
  the container: ctrain sets ``PMIX_MCA_gds=hash`` (unless given). The client's temporary
  directory is under Slurm's TmpFS (default /tmp, which ch-run binds): it must be visible in
  the container at the same path.
- No ``--nv``: ``ch-fromhost --nvidia IMAGE`` copies the host's driver libraries into the image
  directory, once per node and driver (docs/charliecloud.md); ``--nv`` checks they are there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import ClassVar

from ctrain.container.spec import Bind, RunSpec
from ctrain.errors import SpecError
from ctrain.names import CH_ENV_FILE, CHARLIECLOUD
from ctrain.references import is_remote
from ctrain.releases import RuntimeVersion

CONTAINER_TMP = "/tmp"  # where ch-run binds the host's $TMPDIR (or /tmp)
# Where ch-fromhost --nvidia puts the driver libraries: the image's first ldconfig directory.
DRIVER_DIRS = ("usr/local/lib", "usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib", "lib64")
DRIVER_LIBRARY = "libcuda.so.1"
# Slurm's PMIx server keeps its shared-memory store in slurmd's spool, which the container does
# not see: a client inside asks the server for the data instead (PMIx's hash store).
PMIX_GDS = {"PMIX_MCA_gds": "hash"}
FROMHOST_FIX = "run `ch-fromhost --nvidia {image}` on the GPU node first (docs/charliecloud.md)"


def parse_image_env(text: str) -> dict[str, str]:
    """``IMAGE/ch/environment``: ``NAME=VALUE`` lines, blank lines skipped, single quotes
    around a value stripped, as ch-run's ``--set-env`` reads the file."""
    variables: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or not key:
            continue
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        variables[key] = value
    return variables


def image_env(image: str) -> dict[str, str]:
    """The image's own variables (none when it has no ``ch/environment``)."""
    try:
        return parse_image_env((Path(image) / CH_ENV_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SpecError(
            f"cannot read {Path(image) / CH_ENV_FILE}: {exc.strerror}", "check the image directory"
        ) from exc


def has_driver(image: str) -> bool:
    """Whether ``ch-fromhost --nvidia`` put the NVIDIA driver library into the image."""
    return any((Path(image) / d / DRIVER_LIBRARY).exists() for d in DRIVER_DIRS)


def pending(spec: RunSpec) -> bool:
    """A remote image not pulled yet: planned once as given (--dry-run names the pull), then
    again on the pulled directory, where the image's checks happen."""
    return is_remote(spec.image, "exec")


def pmix(env: Mapping[str, str]) -> bool:
    """Whether a PMIx server (``srun --mpi=pmix``) started this process."""
    return "PMIX_NAMESPACE" in env


def job_tmp_bind(spec: RunSpec) -> Bind | None:
    """The bind ctrain adds for the job's TMPDIR: ch-run binds that directory at /tmp itself."""
    tmpdir = spec.env.get("TMPDIR")
    return Bind(tmpdir, tmpdir) if tmpdir else None


def inside(path: str, binds: tuple[Bind, ...], tmpdir: str) -> str | None:
    """Where the host directory ``path`` is in the container: under a bind, or under the
    host's temporary directory (bound at /tmp); None when the container does not see it."""
    host = PurePosixPath(path)
    for src, dst in [(b.src, b.dst) for b in reversed(binds)] + [(tmpdir, CONTAINER_TMP)]:
        if host.is_relative_to(src):
            return str(PurePosixPath(dst) / host.relative_to(src))
    return None


def _check_bind(bind: Bind, image: str | None) -> None:
    if ":" in bind.src or ":" in bind.dst:
        raise SpecError(
            f"bind path {bind.src}:{bind.dst} holds ':', which ch-run's -b SRC:DST cannot express",
            "bind a parent directory or a symlink without ':'",
        )
    if bind.mode == "ro":
        raise SpecError(
            f"bind {bind.src}:{bind.dst}:ro: ch-run has no read-only binds",
            f"drop :ro (write -B {bind.src}:{bind.dst}), or use --runtime apptainer or docker",
        )
    where = Path(image or "/") / bind.dst.lstrip("/")
    if image is not None and not where.is_dir() and not where.is_symlink():
        raise SpecError(
            f"bind destination {bind.dst} is not a directory in the image {image} (ch-run "
            "mounts the image read-only and cannot create it)",
            f"bind onto a directory the image has (-B {bind.src}:/mnt; also /srv, /opt), "
            f"or add it to the image once: mkdir -p {where}",
        )


@dataclass(frozen=True)
class Charliecloud:
    name: str = CHARLIECLOUD
    # the image's own `ctrain launch` runs: ch-run binds have no read-only mode, and a bind's
    # destination must already exist in the image
    carries_launcher: ClassVar[bool] = False

    def _binds(self, spec: RunSpec) -> tuple[Bind, ...]:
        skipped = job_tmp_bind(spec)
        return tuple(b for b in spec.binds if b != skipped)

    def _env(self, spec: RunSpec) -> dict[str, str]:
        """The container's whole environment: the image's, then ctrain's chosen variables."""
        chosen = {k: v for k, v in spec.env.items() if k != "TMPDIR"}  # ch-run unsets it
        own = {} if pending(spec) else image_env(spec.image)
        return {**own, **(PMIX_GDS if pmix(chosen) else {}), **chosen}

    def _workdir(self, spec: RunSpec) -> str | None:
        if spec.workdir is not None:
            return spec.workdir
        tmpdir = spec.env.get("TMPDIR", CONTAINER_TMP)
        return inside(spec.cwd, self._binds(spec), tmpdir)

    def argv(self, spec: RunSpec, program: str) -> list[str]:
        if spec.overlay is not None:
            raise SpecError(
                "--overlay needs apptainer or singularity; ch-run mounts no overlay image",
                "bind a directory instead (-B SRC:/mnt) or use --runtime apptainer",
            )
        if spec.action == "run":
            raise SpecError(
                "ch-run has no runscript (ctrain run runs the image's entrypoint)",
                "use ctrain exec IMAGE -- CMD",
            )
        if not pending(spec) and not Path(spec.image).is_dir():
            raise SpecError(
                f"image {spec.image!r} is not an image directory (ctrain runs no SquashFS "
                "file: docs/charliecloud.md)",
                f"pull it: ctrain pull --runtime {self.name} docker-daemon://NAME:TAG, "
                "or convert it: ch-convert IMAGE DIR",
            )
        if spec.nv and not has_driver(spec.image):
            raise SpecError(
                f"--nv: ch-run has no --nv, and the image {spec.image} holds no NVIDIA driver "
                f"library ({DRIVER_LIBRARY})",
                FROMHOST_FIX.format(image=spec.image) + ", or drop --nv",
            )
        if not spec.env.get("USER"):  # passed through from the host, or given with --env
            raise SpecError("ch-run refuses to start without USER", "export USER=$(id -un)")
        argv = [program]
        for bind in self._binds(spec):
            _check_bind(bind, None if pending(spec) else spec.image)
            argv += ["-b", f"{bind.src}:{bind.dst}"]
        workdir = self._workdir(spec)
        if workdir is not None:
            argv += ["-c", workdir]
        argv.append(f"--unset-env=!({'|'.join(sorted(self._env(spec)))})")
        command = list(spec.command) if spec.action == "exec" else ["/bin/bash"]
        return [*argv, spec.image, "--", *command]

    def process_env(self, spec: RunSpec, environ: Mapping[str, str]) -> dict[str, str]:
        return {**environ, **self._env(spec)}

    def probed(self, program: str, version_of: Callable[[str], RuntimeVersion]) -> Charliecloud:
        return self

    def notes(self, spec: RunSpec) -> list[str]:
        lines = [
            f"container environment exactly: the image's {CH_ENV_FILE}, then the variables below "
            "(ch-run --unset-env removes the rest)"
        ]
        tmpdir = spec.env.get("TMPDIR")
        lines.append(f"host {tmpdir or CONTAINER_TMP} is the container's /tmp (ch-run binds it)")
        if spec.workdir is None and self._workdir(spec) is None:
            lines.append(f"{spec.cwd} is not in the container: it starts in ch-run's default")
        if pmix(spec.env) and "PMIX_MCA_gds" not in spec.env:
            lines.append("PMIx: PMIX_MCA_gds=hash (the server's store is outside the container)")
        if spec.nv:
            lines.append("GPUs: the driver libraries ch-fromhost --nvidia put in the image")
        return lines

    def image_file(self, image: str) -> str | None:
        return None
