"""Host and container MPI, checked before the first step: proceed, warn or refuse.

Pure: the launcher's facts come from the rank's environment (a ``Mapping``), the image's from
``ImageMpi`` (launch/mpilibs.py reads them). Two seams are checked, each only where its
variables are present:

- PMIx: a client connects through the first ``PMIX_SERVER_URI<NN>`` variable whose wire
  protocol (``NN``) it speaks; the server sets one variable per protocol it offers, and
  ``PMIX_VERSION`` to its release. No protocol in common: the rank cannot connect.
- Open MPI's mpirun (the "hybrid" model): its runtime and the image's MPI library must be one
  major release. ``OMPI_MCA_orte_*`` variables mark ORTE (Open MPI 4.x and older); rank
  variables without them mark PRRTE (Open MPI 5 and newer).

docs/mpi-and-network.md ("Host and container MPI") gives the sources of every rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from ctrain.checkline import Status, rank, warning_line
from ctrain.names import Mode

PROCEED, WARN, REFUSE = "proceed", "warn", "refuse"
# Each verdict's check-line status, which orders them (checkline.rank).
CHECK_STATUS: dict[str, Status] = {PROCEED: "PASS", WARN: "WARN", REFUSE: "FAIL"}
_URI = re.compile(r"PMIX_SERVER_URI(\d*)")
GLOO = "start the ranks with horovodrun --gloo: Horovod on Gloo needs no MPI"
OWN_MPIRUN = (
    "use the image's own mpirun inside one container (ctrain exec --no-launch IMAGE -- mpirun ...)"
)


class ImageMpi(NamedTuple):
    """The Open MPI and PMIx releases this process's libraries are (None: not known)."""

    openmpi: str | None = None
    pmix: str | None = None
    source: str = "nothing"  # where they were read: CTRAIN_IMAGE_MPI, dpkg, libraries


class LauncherMpi(NamedTuple):
    """What the launcher told this rank."""

    family: str  # "orte", "prrte", "slurm", "pmix" or "" (no MPI launcher)
    name: str  # as the messages name it
    offered: tuple[str, ...]  # the NN of each PMIX_SERVER_URI<NN> set, oldest first
    pmix: str | None  # PMIX_VERSION: the server's release


class MpiVerdict(NamedTuple):
    """Whether this rank's MPI launcher and the image's MPI libraries work together."""

    status: str  # proceed, warn or refuse
    checked: bool
    message: str
    fix: str = ""

    def explain(self) -> dict[str, Any]:
        return self._asdict()

    def line(self) -> str:
        """The one line a warning prints on stderr."""
        return warning_line(self.message, self.fix)


def release(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of a release such as ``4.2.2rc2``, ``1:4.1.4-3``, ``5.0`` or ``3``."""
    numbers = re.match(r"(?:\d+:)?(\d+)(?:\.(\d+))?", text or "")
    return (int(numbers.group(1)), int(numbers.group(2) or 0)) if numbers else None


def _order(suffix: str) -> int:
    return int(suffix.ljust(2, "0")) if suffix else 10  # "" is PMIx 1.x's plain variable


def offered(environ: Mapping[str, str]) -> tuple[str, ...]:
    suffixes = {m.group(1) for m in map(_URI.fullmatch, environ) if m and environ[m.group(0)]}
    return tuple(sorted(suffixes, key=_order))


def client_protocols(pmix: str) -> tuple[str, ...]:
    """The PMIX_SERVER_URI<NN> a PMIx client of release ``pmix`` looks for (its bfrops
    components; 1.x servers' plain variable through the usock transport of 2.x and 3.x)."""
    major, minor = release(pmix) or (0, 0)
    if major < 2:
        return ("",)
    if major == 2:
        return ("", "2", "21") if minor >= 1 else ("", "2")
    if major == 3:
        return ("", "2", "21", "3")
    if (major, minor) == (4, 0):
        return ("2", "21", "3", "4")
    if major in (4, 5):
        return ("2", "21", "3", "4", "41")
    if (major, minor) == (6, 0):
        return ("2", "21", "3", "4", "41", "51")
    return ("12", "20", "21", "3", "4", "41", "51", "61")  # 6.1 on: named after its components


def launcher_of(environ: Mapping[str, str]) -> LauncherMpi:
    uris, pmix = offered(environ), environ.get("PMIX_VERSION") or None
    mpi_type = environ.get("SLURM_MPI_TYPE", "")
    if any(key.startswith("OMPI_MCA_orte_") for key in environ):
        return LauncherMpi("orte", "the host's mpirun (ORTE: Open MPI 4.x or older)", uris, pmix)
    if "OMPI_COMM_WORLD_RANK" in environ and uris:
        return LauncherMpi("prrte", "the host's mpirun (PRRTE: Open MPI 5 or newer)", uris, pmix)
    if mpi_type.startswith("pmix") and uris:
        return LauncherMpi("slurm", f"Slurm's PMIx server (srun --mpi={mpi_type})", uris, pmix)
    if uris:
        return LauncherMpi("pmix", "the launcher's PMIx server", uris, pmix)
    return LauncherMpi("", "", (), None)


def _uris(suffixes: tuple[str, ...]) -> str:
    return ", ".join(f"PMIX_SERVER_URI{s}" for s in suffixes)


def _srun_fix(launcher: LauncherMpi, client: tuple[int, int]) -> str:
    if launcher.family == "slurm":
        return f"use srun --mpi=pmix_v{client[0]} if `srun --mpi=list` offers it"
    return "use a host launcher whose PMIx matches the image's"


def _unversioned(suffixes: tuple[str, ...]) -> tuple[int, int] | None:
    """The release series of a server without PMIX_VERSION (set from 3.0 on): 1.x when it
    offers the plain PMIX_SERVER_URI alone, 2.x when it offers no more than v2.1."""
    if suffixes == ("",):
        return (1, 0)
    return (2, 0) if suffixes and max(map(_order, suffixes)) <= 21 else None


def check_pmix(launcher: LauncherMpi, image: ImageMpi) -> MpiVerdict:
    """Whether the image's PMIx client can talk to the launcher's server, and how well."""
    client = release(image.pmix)
    if client is None:
        return MpiVerdict(PROCEED, False, "the image's PMIx release is unknown: PMIx not checked")
    server = f"{launcher.name}, PMIx {launcher.pmix or 'release not given'},"
    common = [s for s in launcher.offered if s in client_protocols(str(image.pmix))]
    if not common:
        offers = f"{server} offers {_uris(launcher.offered)} only"
        if not launcher.offered:  # an mpirun of Open MPI 1.x: ORTE, no PMIx
            offers = f"{launcher.name} set up no PMIx server"
        message = (
            f"{offers}; the image's PMIx {image.pmix} client looks for "
            f"{_uris(client_protocols(str(image.pmix)))}: it cannot connect"
        )
        return MpiVerdict(
            REFUSE, True, message, f"{_srun_fix(launcher, client)}; {OWN_MPIRUN}; {GLOO}"
        )
    wire = f"PMIX_SERVER_URI{common[-1]}"
    server_release = release(launcher.pmix) or _unversioned(launcher.offered)
    if server_release is not None and server_release[0] == client[0]:
        message = f"{server} and the image's PMIx {image.pmix}: one release series, via {wire}"
        return MpiVerdict(PROCEED, True, message)
    message = (
        f"{server} and the image's PMIx {image.pmix} are different release series: they "
        f"connect via {wire} (PMIx's cross-version support), but their shared-memory stores "
        "may not agree"
    )
    fix = f"{_srun_fix(launcher, client)}; if start-up hangs, export PMIX_MCA_gds=hash"
    return MpiVerdict(WARN, True, message, fix)


def check_openmpi(launcher: LauncherMpi, image: ImageMpi) -> MpiVerdict:
    """Whether the host's mpirun and the image's Open MPI are one major release."""
    image_release = release(image.openmpi)
    if image_release is None:
        return MpiVerdict(PROCEED, False, "the image's Open MPI release is unknown: not checked")
    image_mpi = f"the image's Open MPI {image.openmpi}"
    host_major = 5 if launcher.family == "prrte" else 4  # ORTE: 4 or older
    if (image_release[0] >= 5) != (host_major >= 5):
        message = f"{launcher.name} cannot start {image_mpi}: Open MPI does not mix major releases"
        match = "5 or newer" if image_release[0] >= 5 else f"{image_release[0]}.x"
        fix = f"{OWN_MPIRUN}; or a host mpirun of Open MPI {match}; or srun --mpi=pmix"
        return MpiVerdict(REFUSE, True, message, fix)
    old = launcher.family == "orte" and max(map(_order, launcher.offered), default=99) < 30
    if old and image_release[0] >= 4:
        message = (
            f"{launcher.name} offers only PMIx 2 protocols ({_uris(launcher.offered)}), as "
            f"Open MPI 3.x and older do; {image_mpi} does not work with an older mpirun"
        )
        fix = (
            f"use a host mpirun of Open MPI {image_release[0]}.x; {OWN_MPIRUN}; or srun --mpi=pmix"
        )
        return MpiVerdict(WARN, True, message, fix)
    return MpiVerdict(PROCEED, True, f"{launcher.name} and {image_mpi}: one major release")


def unchecked(mode: Mode, environ: Mapping[str, str], *, gloo: bool) -> str:
    """Why this rank's MPI is not checked, or "" when it is. ``gloo``: Horovod runs on Gloo
    alone (launch/gloo.on_gloo_alone)."""
    if mode is not Mode.HOROVOD:
        return f"mode {mode.value} does not use MPI"
    if gloo:
        return "Horovod runs on Gloo"
    if not launcher_of(environ).family:
        return "no PMIx server or Open MPI mpirun set this rank up"
    return ""


def verdict(mode: Mode, environ: Mapping[str, str], image: ImageMpi, *, gloo: bool) -> MpiVerdict:
    """The launcher's MPI against the image's: the worst finding decides."""
    why_not = unchecked(mode, environ, gloo=gloo)
    if why_not:
        return MpiVerdict(PROCEED, False, f"not checked: {why_not}")
    launcher = launcher_of(environ)
    findings = [check_pmix(launcher, image)]
    if launcher.family in ("orte", "prrte"):
        findings.insert(0, check_openmpi(launcher, image))  # shown first at equal severity
    worst = max(findings, key=lambda v: (rank(CHECK_STATUS[v.status]), v.checked))
    if worst.status != PROCEED:
        return worst
    checked = [v for v in findings if v.checked]
    message = "; ".join(v.message for v in (checked or findings))
    return MpiVerdict(PROCEED, bool(checked), message)
