"""The MPI check's truth table: every launcher's environment against every image's MPI.

Each launcher environment holds exactly the variables that launcher gives a rank, per its
source (docs/cluster.md, "Host and container MPI"): Slurm's mpi/pmix plugin calls PMIx's
PMIx_server_setup_fork, which sets PMIX_NAMESPACE, PMIX_RANK, one PMIX_SERVER_URI<NN> per wire
protocol of that PMIx release's listener, PMIX_SECURITY_MODE, PMIX_GDS_MODULE and (3.0 on)
PMIX_VERSION; Open MPI 4's mpirun (ORTE) adds OMPI_COMM_WORLD_* and OMPI_MCA_orte_*; Open MPI
5's (PRRTE) OMPI_COMM_WORLD_* without ORTE's. The Slurm 22.05 + PMIx 4.2.2 and Open MPI 4.1.4
rows are what this machine's srun --mpi=pmix and mpirun set (URIs and paths shortened).
"""

from __future__ import annotations

import itertools

import pytest

from ctrain.launch.mpicheck import (
    PROCEED,
    REFUSE,
    WARN,
    ImageMpi,
    LauncherMpi,
    MpiVerdict,
    check_openmpi,
    client_protocols,
    launcher_of,
    offered,
    release,
    verdict,
)
from ctrain.names import Mode
from tests.support.environs import STEP2
from tests.support.mpi_launchers import LAUNCHERS, ORTE

IMAGES = {
    "ctrain-debian12": ImageMpi("4.1.4", "4.2.2", "dpkg"),  # the ctrain images
    "ompi5-pmix5": ImageMpi("5.0.7", "5.0.6", "dpkg"),  # Debian 13's packages
    "ompi4-pmix3": ImageMpi("4.1", "3", "libraries"),
    "unknown": ImageMpi(),
}
P, W, R, U = PROCEED, WARN, REFUSE, "unchecked"  # U: proceeds, nothing compared
EXPECTED: dict[str, tuple[str, str, str, str]] = {  # by image, in IMAGES' order
    "slurm-pmix4": (P, W, W, U),
    "slurm-pmix3": (W, W, P, U),
    "slurm-pmix2": (W, W, W, U),
    "slurm-pmix1": (R, R, W, U),
    "slurm-pmix5": (W, P, W, U),
    "slurm-pmix6.1": (W, W, W, U),
    "orte-4.1-pmix4": (P, R, W, U),
    "orte-4.1-pmix3": (W, R, P, U),
    "orte-3.1": (W, R, W, U),
    "prrte-5.0": (R, P, R, U),
}


def outcome(found: MpiVerdict) -> str:
    return found.status if found.checked else U


@pytest.mark.parametrize(
    ("launcher", "image"),
    [pytest.param(*pair, id="-".join(pair)) for pair in itertools.product(LAUNCHERS, IMAGES)],
)
def test_truth_table(launcher: str, image: str) -> None:
    found = verdict(Mode.HOROVOD, LAUNCHERS[launcher], IMAGES[image], gloo=False)
    want = EXPECTED[launcher][list(IMAGES).index(image)]
    assert outcome(found) == want, found
    assert found.status == (PROCEED if want == U else want)
    assert "\n" not in found.message and found.message
    assert bool(found.fix) == (found.status != PROCEED)


NOT_CHECKED = {
    "plain srun": (Mode.HOROVOD, STEP2, "no PMIx server or Open MPI mpirun set this rank up"),
    "srun --mpi=pmi2": (
        Mode.HOROVOD,
        {**STEP2, "SLURM_MPI_TYPE": "pmi2", "PMI_RANK": "1", "PMI_SIZE": "2", "PMI_FD": "5"},
        "no PMIx server or Open MPI mpirun set this rank up",
    ),
    "multiworker": (
        Mode.MULTIWORKER,
        LAUNCHERS["slurm-pmix1"],
        "mode multiworker does not use MPI",
    ),
    "single": (Mode.SINGLE, LAUNCHERS["prrte-5.0"], "mode single does not use MPI"),
}


@pytest.mark.parametrize("case", NOT_CHECKED)
def test_not_checked_without_mpi_or_when_switched_off(case: str) -> None:
    mode, environ, why = NOT_CHECKED[case]
    for image in IMAGES.values():
        found = verdict(mode, environ, image, gloo=False)
        assert found == MpiVerdict(PROCEED, False, f"not checked: {why}")


@pytest.mark.parametrize("launcher", ["prrte-5.0", "slurm-pmix1"])
def test_horovod_on_gloo_alone_is_not_checked_whatever_launcher_set_the_rank_up(
    launcher: str,
) -> None:
    """The plan says Gloo (launch/gloo.on_gloo_alone); the HOROVOD_* variables are not read."""
    for image in IMAGES.values():
        found = verdict(Mode.HOROVOD, LAUNCHERS[launcher], image, gloo=True)
        assert found == MpiVerdict(PROCEED, False, "not checked: Horovod runs on Gloo")


def test_a_users_horovod_controller_gloo_alone_is_still_checked() -> None:
    """HOROVOD_CONTROLLER=gloo leaves Horovod's CPU operations on MPI (its default), so MPI_Init
    runs: the pairing matters as much as without it."""
    environ = {**LAUNCHERS["prrte-5.0"], "HOROVOD_CONTROLLER": "gloo"}
    for image in IMAGES.values():
        found = verdict(Mode.HOROVOD, environ, image, gloo=False)
        assert found == verdict(Mode.HOROVOD, LAUNCHERS["prrte-5.0"], image, gloo=False)
    assert verdict(Mode.HOROVOD, environ, IMAGES["ctrain-debian12"], gloo=False).checked


def test_the_launcher_is_named_from_its_own_variables() -> None:
    families = {name: launcher_of(env).family for name, env in LAUNCHERS.items()}
    assert families == {
        **{name: "slurm" for name in LAUNCHERS if name.startswith("slurm")},
        **{name: "orte" for name in LAUNCHERS if name.startswith("orte")},
        "prrte-5.0": "prrte",
    }
    no_slurm = {k: v for k, v in LAUNCHERS["slurm-pmix4"].items() if k != "SLURM_MPI_TYPE"}
    assert launcher_of(no_slurm).family == "pmix"
    assert launcher_of({**LAUNCHERS["slurm-pmix4"], **ORTE}).family == "orte"  # mpirun in srun
    assert launcher_of(STEP2).family == ""


def test_offered_protocols_oldest_first_and_empty_values_ignored() -> None:
    assert offered(LAUNCHERS["slurm-pmix4"]) == ("2", "21", "3", "4", "41")
    assert offered(LAUNCHERS["slurm-pmix2"]) == ("", "2", "21")
    assert offered({"PMIX_SERVER_URI3": "", "PMIX_SERVER_URI2USOCK": "x"}) == ()


@pytest.mark.parametrize(
    ("pmix", "protocols"),
    [
        ("1.2.5", ("",)),
        ("2.0.3", ("", "2")),
        ("2.1.4", ("", "2", "21")),
        ("3.2.3", ("", "2", "21", "3")),
        ("4.0.0", ("2", "21", "3", "4")),
        ("4.2.2", ("2", "21", "3", "4", "41")),
        ("5.0", ("2", "21", "3", "4", "41")),
        ("6.0.0", ("2", "21", "3", "4", "41", "51")),
        ("6.1.0", ("12", "20", "21", "3", "4", "41", "51", "61")),
    ],
)
def test_client_protocols_by_release(pmix: str, protocols: tuple[str, ...]) -> None:
    assert client_protocols(pmix) == protocols


def test_release_reads_upstream_debian_and_series_forms() -> None:
    assert release("4.2.2rc2") == (4, 2)
    assert release("1:4.1.4-3") == (4, 1)
    assert release("5.0") == (5, 0)
    assert release("3") == (3, 0)  # a series from a library's name
    assert release("unknown") is None and release(None) is None


def test_messages_name_both_sides_and_the_fix() -> None:
    image = IMAGES["ctrain-debian12"]
    refused = verdict(Mode.HOROVOD, LAUNCHERS["slurm-pmix1"], image, gloo=False)
    assert refused.message == (
        "Slurm's PMIx server (srun --mpi=pmix_v1), PMIx release not given, offers "
        "PMIX_SERVER_URI only; the image's PMIx 4.2.2 client looks for PMIX_SERVER_URI2, "
        "PMIX_SERVER_URI21, PMIX_SERVER_URI3, PMIX_SERVER_URI4, PMIX_SERVER_URI41: it cannot "
        "connect"
    )
    assert refused.fix.startswith("use srun --mpi=pmix_v4 if `srun --mpi=list` offers it; ")
    assert "Gloo" in refused.fix and "mpirun inside one container" in refused.fix
    warned = verdict(Mode.HOROVOD, LAUNCHERS["slurm-pmix3"], image, gloo=False)
    assert "PMIx 3.2.3," in warned.message and "via PMIX_SERVER_URI3 " in warned.message
    assert "PMIX_MCA_gds=hash" in warned.fix
    assert warned.line().startswith("ctrain: warning: Slurm's PMIx server (srun --mpi=pmix_v3)")
    hybrid = verdict(Mode.HOROVOD, LAUNCHERS["prrte-5.0"], image, gloo=False)
    assert hybrid.message == (
        "the host's mpirun (PRRTE: Open MPI 5 or newer) cannot start the image's Open MPI "
        "4.1.4: Open MPI does not mix major releases"
    )
    assert "a host mpirun of Open MPI 4.x" in hybrid.fix
    old = verdict(Mode.HOROVOD, LAUNCHERS["orte-3.1"], image, gloo=False)
    assert "as Open MPI 3.x and older do" in old.message  # shown before PMIx's warning
    fine = verdict(Mode.HOROVOD, LAUNCHERS["orte-4.1-pmix4"], image, gloo=False)
    assert fine.message.startswith(
        "the host's mpirun (ORTE: Open MPI 4.x or older) and the image's Open MPI 4.1.4: one "
        "major release; "
    )
    assert fine.explain() == {
        "status": "proceed",
        "checked": True,
        "message": fine.message,
        "fix": "",
    }


OMPI31 = ImageMpi("3.1.6", "2.1.4", "libraries")  # Open MPI 3.1 with its own PMIx 2.1
ORTE_NAME = "the host's mpirun (ORTE: Open MPI 4.x or older)"
OWN = (
    "use the image's own mpirun inside one container (ctrain exec --no-launch IMAGE -- mpirun ...)"
)
CROSS = "(PMIx's cross-version support), but their shared-memory stores may not agree"
VERDICTS: dict[str, tuple[dict[str, str], ImageMpi, MpiVerdict]] = {
    "pmix2 server, pmix2 client": (
        LAUNCHERS["slurm-pmix2"],
        OMPI31,
        MpiVerdict(
            PROCEED,
            True,
            "Slurm's PMIx server (srun --mpi=pmix_v2), PMIx release not given, and the image's "
            "PMIx 2.1.4: one release series, via PMIX_SERVER_URI21",
        ),
    ),
    "open mpi 3.1 both sides": (
        LAUNCHERS["orte-3.1"],
        OMPI31,
        MpiVerdict(
            PROCEED,
            True,
            f"{ORTE_NAME} and the image's Open MPI 3.1.6: one major release; {ORTE_NAME}, PMIx "
            "release not given, and the image's PMIx 2.1.4: one release series, via "
            "PMIX_SERVER_URI21",
        ),
    ),
    "nothing known of the image": (
        LAUNCHERS["orte-4.1-pmix4"],
        IMAGES["unknown"],
        MpiVerdict(
            PROCEED,
            False,
            "the image's Open MPI release is unknown: not checked; the image's PMIx release is "
            "unknown: PMIx not checked",
        ),
    ),
    "pmix series differ under srun": (
        LAUNCHERS["slurm-pmix3"],
        IMAGES["ctrain-debian12"],
        MpiVerdict(
            WARN,
            True,
            "Slurm's PMIx server (srun --mpi=pmix_v3), PMIx 3.2.3, and the image's PMIx 4.2.2 are "
            f"different release series: they connect via PMIX_SERVER_URI3 {CROSS}",
            "use srun --mpi=pmix_v4 if `srun --mpi=list` offers it; if start-up hangs, export "
            "PMIX_MCA_gds=hash",
        ),
    ),
    "pmix series differ under mpirun": (
        LAUNCHERS["orte-4.1-pmix3"],
        IMAGES["ctrain-debian12"],
        MpiVerdict(
            WARN,
            True,
            f"{ORTE_NAME}, PMIx 3.2.3, and the image's PMIx 4.2.2 are different release series: "
            f"they connect via PMIX_SERVER_URI3 {CROSS}",
            "use a host launcher whose PMIx matches the image's; if start-up hangs, export "
            "PMIX_MCA_gds=hash",
        ),
    ),
    "open mpi 5 image under orte": (
        LAUNCHERS["orte-4.1-pmix4"],
        IMAGES["ompi5-pmix5"],
        MpiVerdict(
            REFUSE,
            True,
            f"{ORTE_NAME} cannot start the image's Open MPI 5.0.7: Open MPI does not mix major "
            "releases",
            f"{OWN}; or a host mpirun of Open MPI 5 or newer; or srun --mpi=pmix",
        ),
    ),
    "pmix1 server, pmix2 client": (
        LAUNCHERS["slurm-pmix1"],
        OMPI31,
        MpiVerdict(
            WARN,
            True,
            "Slurm's PMIx server (srun --mpi=pmix_v1), PMIx release not given, and the image's "
            f"PMIx 2.1.4 are different release series: they connect via PMIX_SERVER_URI {CROSS}",
            "use srun --mpi=pmix_v2 if `srun --mpi=list` offers it; if start-up hangs, export "
            "PMIX_MCA_gds=hash",
        ),
    ),
    "open mpi 4 image under open mpi 3.1": (
        LAUNCHERS["orte-3.1"],
        IMAGES["ctrain-debian12"],
        MpiVerdict(
            WARN,
            True,
            f"{ORTE_NAME} offers only PMIx 2 protocols (PMIX_SERVER_URI2, PMIX_SERVER_URI21), as "
            "Open MPI 3.x and older do; the image's Open MPI 4.1.4 does not work with an older "
            "mpirun",
            f"use a host mpirun of Open MPI 4.x; {OWN}; or srun --mpi=pmix",
        ),
    ),
}


@pytest.mark.parametrize("case", VERDICTS)
def test_whole_verdicts(case: str) -> None:
    environ, image, want = VERDICTS[case]
    found = verdict(Mode.HOROVOD, environ, image, gloo=False)
    assert found == want
    assert found.line() == (
        f"ctrain: warning: {want.message}" + (f" Fix: {want.fix}" if want.fix else "")
    )


def test_an_mpirun_without_pmix_is_not_taken_for_an_old_one() -> None:
    """Open MPI 1.10's mpirun (ORTE, no PMIx): the releases are not compared by protocol; the
    PMIx check refuses, as no PMIX_SERVER_URI is there to connect to."""
    environ = {k: v for k, v in ORTE.items() if k != "OMPI_MCA_pmix"}
    launcher = launcher_of(environ)
    assert launcher == LauncherMpi("orte", ORTE_NAME, (), None)
    assert check_openmpi(launcher, IMAGES["ctrain-debian12"]) == MpiVerdict(
        PROCEED, True, f"{ORTE_NAME} and the image's Open MPI 4.1.4: one major release"
    )
    assert verdict(Mode.HOROVOD, environ, IMAGES["ctrain-debian12"], gloo=False) == MpiVerdict(
        REFUSE,
        True,
        f"{ORTE_NAME} set up no PMIx server; the image's PMIx 4.2.2 client looks for "
        "PMIX_SERVER_URI2, PMIX_SERVER_URI21, PMIX_SERVER_URI3, PMIX_SERVER_URI4, "
        "PMIX_SERVER_URI41: it cannot connect",
        f"use a host launcher whose PMIx matches the image's; {OWN}; start the ranks with "
        "horovodrun --gloo: Horovod on Gloo needs no MPI",
    )


def test_launchers_in_full() -> None:
    no_slurm = {k: v for k, v in LAUNCHERS["slurm-pmix4"].items() if k != "SLURM_MPI_TYPE"}
    assert launcher_of(no_slurm) == LauncherMpi(
        "pmix", "the launcher's PMIx server", ("2", "21", "3", "4", "41"), "4.2.2rc2"
    )
    assert launcher_of(STEP2) == LauncherMpi("", "", (), None)
