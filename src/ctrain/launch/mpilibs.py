"""Which Open MPI and PMIx this process's libraries are, read from files at launch speed, and
the launch's MPI verdict (launch/mpicheck.py) applied: a warning line, or a LaunchError.

Inside an image that is the container's; in a venv, the host's. In order, the first that
answers: ``CTRAIN_IMAGE_MPI`` (``openmpi=4.1.4,pmix=4.2.2``, for images whose MPI no package
manager installed: set it in the recipe), dpkg's database (the Debian packages the ctrain
images install, every image built so far included), the shared libraries' file names (libtool
names them after the release series). No program is run.
"""

from __future__ import annotations

import glob
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from ctrain.checkline import Check
from ctrain.errors import LaunchError
from ctrain.launch.gloo import on_gloo_alone
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.mpicheck import (
    CHECK_STATUS,
    PROCEED,
    REFUSE,
    WARN,
    ImageMpi,
    MpiVerdict,
    unchecked,
    verdict,
)
from ctrain.names import Mode

RECORD = "CTRAIN_IMAGE_MPI"
DPKG_STATUS = "var/lib/dpkg/status"
# Where images keep them: the distribution's directories, a build's own prefix under /usr/local
# or /opt (NGC's images build Open MPI into /usr/local/mpi, HPC-X into /opt/hpcx/ompi)
LIBRARY_DIRS = ("usr/lib/*-linux-gnu", "usr/lib64", "usr/lib", "usr/local/lib", "usr/local/*/lib",
                "opt/*/lib", "opt/*/*/lib")  # fmt: skip
# libtool's "age" in libmpi.so.40.AGE.REV and libpmix.so.2.AGE.REV, by release series (each
# project's VERSION file, per release tag); an age between two rows is the older series.
OPENMPI_AGES = ((0, "3.0"), (10, "3.1"), (20, "4.0"), (30, "4.1"), (40, "5.0"))
PMIX_AGES = ((1, "2"), (2, "3"), (3, "4.0"), (5, "4.1"), (6, "4.2"), (13, "5.0"), (18, "6.0"),
             (23, "6.1"))  # fmt: skip
_PACKAGES = {"openmpi": re.compile(r"libopenmpi\d+\S*"), "pmix": re.compile(r"libpmix\d+\S*")}


def from_record(text: str) -> dict[str, str]:
    """``openmpi=4.1.4,pmix=4.2.2`` as a dict (unknown names and empty values left out)."""
    pairs = (part.partition("=") for part in text.split(","))
    return {k.strip(): v.strip() for k, _, v in pairs if k.strip() in _PACKAGES and v.strip()}


def upstream(version: str) -> str:
    """A Debian version's upstream part: ``1:4.1.4-3+b1`` is ``4.1.4``."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def from_dpkg(status: str) -> dict[str, str]:
    """The installed libopenmpiN and libpmixN packages' upstream versions in dpkg's status."""
    versions: dict[str, str] = {}
    for paragraph in status.split("\n\n"):
        fields = dict(re.findall(r"^([\w-]+): *(.*)$", paragraph, re.M))
        if not fields.get("Status", "").endswith(" installed"):
            continue
        for what, pattern in _PACKAGES.items():
            if pattern.fullmatch(fields.get("Package", "")) and "Version" in fields:
                versions.setdefault(what, upstream(fields["Version"]))
    return versions


def _series(age: int, table: tuple[tuple[int, str], ...]) -> str | None:
    rows = [series for first, series in table if first <= age]
    return rows[-1] if rows else None


def from_libraries(names: Iterable[str]) -> dict[str, str]:
    """The release series of libmpi.so.40.AGE.REV and libpmix.so.2.AGE.REV file names."""
    releases: dict[str, str] = {}
    for name in names:
        mpi = re.fullmatch(r"libmpi\.so\.40\.(\d+)\.\d+", name)
        pmix = re.fullmatch(r"libpmix\.so\.2\.(\d+)\.\d+", name)
        series = None
        if mpi:
            series = _series(int(mpi.group(1)), OPENMPI_AGES)
        elif pmix:
            series = _series(int(pmix.group(1)), PMIX_AGES)
        if series:
            releases.setdefault("openmpi" if mpi else "pmix", series)
    return releases


def library_names(root: Path, environ: Mapping[str, str]) -> list[str]:
    dirs = [d for pattern in LIBRARY_DIRS for d in sorted(glob.glob(str(root / pattern)))]
    dirs += [d for d in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    names: list[str] = []
    for directory in dirs:
        try:
            names += [n for n in os.listdir(directory) if n.startswith(("libmpi.", "libpmix."))]
        except OSError:
            continue
    return names


def image_mpi(environ: Mapping[str, str], root: Path = Path("/")) -> ImageMpi:
    """This process's Open MPI and PMIx releases, from the first source that names any."""
    record = from_record(environ.get(RECORD, ""))
    if record:
        return ImageMpi(record.get("openmpi"), record.get("pmix"), RECORD)
    try:
        status = (root / DPKG_STATUS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        status = ""
    packaged = from_dpkg(status)
    if packaged:
        return ImageMpi(packaged.get("openmpi"), packaged.get("pmix"), "dpkg")
    libraries = from_libraries(library_names(root, environ))
    if libraries:
        return ImageMpi(libraries.get("openmpi"), libraries.get("pmix"), "libraries")
    return ImageMpi()


def check(mode: Mode, environ: Mapping[str, str], *, gloo: bool, skip: bool) -> MpiVerdict:
    """The verdict for a rank in ``mode``; the image's files are read only when it is checked.
    ``gloo``: the plan's (launch/gloo.on_gloo_alone); ``skip``: the user's --skip-mpi-check
    (CTRAIN_SKIP_MPI_CHECK), for a verdict that is wrong."""
    why_not = "--skip-mpi-check" if skip else unchecked(mode, environ, gloo=gloo)
    if why_not:
        return MpiVerdict(PROCEED, False, f"not checked: {why_not}")
    return verdict(mode, environ, image_mpi(environ), gloo=gloo)


def enforce(found: MpiVerdict, rank: int) -> None:
    """A refusal raises (every rank); a warning is one stderr line from rank 0."""
    if found.status == REFUSE:
        raise LaunchError(found.message, found.fix)
    if found.status == WARN and rank == 0:
        print(found.line(), file=sys.stderr, flush=True)


def doctor_check(environ: Mapping[str, str]) -> Check:
    """``ctrain doctor``'s mpi-match line, as a Horovod rank here."""
    image = image_mpi(environ)
    here = f"Open MPI {image.openmpi or 'unknown'}, PMIx {image.pmix or 'unknown'} ({image.source})"
    job = JobEnv.from_environ(environ, os.uname().nodename)
    gloo = on_gloo_alone(Mode.HOROVOD, job, job.mpi.size or 1)
    said = verdict(Mode.HOROVOD, environ, image, gloo=gloo)
    detail = said.message if said.checked else f"{here}; {said.message}"
    return Check("mpi-match", CHECK_STATUS[said.status], detail, said.fix)
