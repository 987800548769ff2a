"""The image's MPI read from files (record, dpkg, library names), the verdict applied at launch
(a warning from rank 0, a refusal before the command runs), `--explain --json`'s ``mpi_check``
and doctor's line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ctrain.errors import LaunchError
from ctrain.launch import mpilibs
from ctrain.launch.mpicheck import PROCEED, REFUSE, WARN, ImageMpi, MpiVerdict
from ctrain.names import Mode
from tests.support.helpers import run_ctrain
from tests.support.mpi_launchers import LAUNCHERS

# Two paragraphs as Debian 12's /var/lib/dpkg/status has them in the ctrain images, and one
# package removed but not purged.
DPKG_STATUS = """\
Package: libopenmpi3
Status: install ok installed
Priority: optional
Architecture: amd64
Multi-Arch: same
Source: openmpi (4.1.4-3)
Version: 4.1.4-3+b1
Depends: libc6 (>= 2.34), libpmix2 (>= 4.2.2)
Description: high performance message passing library -- shared library
 Open MPI is a project combining technologies and resources from
 several other projects.

Package: libpmix2
Status: install ok installed
Architecture: amd64
Source: pmix
Version: 4.2.2-1+deb12u1
Description: Process Management Interface (Exascale) library

Package: libpmix1
Status: deinstall ok config-files
Architecture: amd64
Version: 1:1.2.5-1
"""
# The library file names of the same packages, and those of other releases.
DEBIAN12_LIBS = ["libmpi.so", "libmpi.so.40", "libmpi.so.40.30.4", "libpmix.so.2.6.2"]


def test_dpkg_names_the_installed_packages_upstream_versions() -> None:
    assert mpilibs.from_dpkg(DPKG_STATUS) == {"openmpi": "4.1.4", "pmix": "4.2.2"}
    assert mpilibs.from_dpkg("") == {}
    assert mpilibs.upstream("1:5.0.7-1") == "5.0.7"
    trixie = "Package: libopenmpi40\nStatus: install ok installed\nVersion: 5.0.7-1\n"
    assert mpilibs.from_dpkg(trixie) == {"openmpi": "5.0.7"}


@pytest.mark.parametrize(
    ("names", "found"),
    [
        (DEBIAN12_LIBS, {"openmpi": "4.1", "pmix": "4.2"}),
        (["libmpi.so.40.40.7", "libpmix.so.2.13.3"], {"openmpi": "5.0", "pmix": "5.0"}),
        (["libmpi.so.40.20.7", "libpmix.so.2.2.35"], {"openmpi": "4.0", "pmix": "3"}),
        (["libmpi.so.40.10.4", "libpmix.so.2.1.25"], {"openmpi": "3.1", "pmix": "2"}),
        (["libpmix.so.2.9.5", "libpmix.so.2.23.0"], {"pmix": "4.2"}),  # the first found
        (["libpmix.so.2.0.1", "libmpi.so.12.0.5", "libmpich.so.12"], {}),
    ],
)
def test_library_names_give_the_release_series(names: list[str], found: dict[str, str]) -> None:
    assert mpilibs.from_libraries(names) == found


def test_the_first_source_that_names_any_wins(tmp_path: Path) -> None:
    libs = tmp_path / "usr" / "lib" / "x86_64-linux-gnu"
    libs.mkdir(parents=True)
    for name in DEBIAN12_LIBS:
        (libs / name).touch()
    assert mpilibs.image_mpi({}, tmp_path) == ImageMpi("4.1", "4.2", "libraries")
    status = tmp_path / mpilibs.DPKG_STATUS
    status.parent.mkdir(parents=True)
    status.write_text(DPKG_STATUS)
    assert mpilibs.image_mpi({}, tmp_path) == ImageMpi("4.1.4", "4.2.2", "dpkg")
    record = {mpilibs.RECORD: "openmpi=5.0.7, pmix=5.0.6, cuda=12"}
    assert mpilibs.image_mpi(record, tmp_path) == ImageMpi("5.0.7", "5.0.6", mpilibs.RECORD)
    assert mpilibs.image_mpi({}, tmp_path / "empty") == ImageMpi(None, None, "nothing")


@pytest.mark.parametrize("prefix", ["usr/local/mpi/lib", "opt/hpcx/ompi/lib", "opt/openmpi/lib"])
def test_an_mpi_built_into_its_own_prefix_is_found(tmp_path: Path, prefix: str) -> None:
    """No package manager installed it (NGC's images: /usr/local/mpi; HPC-X: /opt/hpcx/ompi)."""
    libs = tmp_path / prefix
    libs.mkdir(parents=True)
    for name in ("libmpi.so.40.30.5", "libpmix.so.2.6.2"):
        (libs / name).touch()
    assert mpilibs.image_mpi({}, tmp_path) == ImageMpi("4.1", "4.2", "libraries")


def test_ld_library_path_is_searched(tmp_path: Path) -> None:
    (tmp_path / "libpmix.so.2.13.3").touch()
    found = mpilibs.image_mpi({"LD_LIBRARY_PATH": f"{tmp_path}:"}, tmp_path / "root")
    assert found == ImageMpi(None, "5.0", "libraries")


def test_an_unchecked_launch_reads_no_file(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: object) -> ImageMpi:
        raise AssertionError("read the image's files")

    monkeypatch.setattr(mpilibs, "image_mpi", never)
    found = mpilibs.check(Mode.MULTIWORKER, LAUNCHERS["slurm-pmix4"], gloo=False, skip=False)
    assert found == MpiVerdict(PROCEED, False, "not checked: mode multiworker does not use MPI")


def test_a_refusal_raises_on_every_rank_and_a_warning_prints_on_rank_0_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    refused = MpiVerdict(REFUSE, True, "they cannot connect", "use srun --mpi=pmix_v4")
    for rank in (0, 1):
        with pytest.raises(LaunchError) as raised:
            mpilibs.enforce(refused, rank)
        assert (raised.value.message, raised.value.fix) == (refused.message, refused.fix)
        assert raised.value.exit_code == 4
    warned = MpiVerdict(WARN, True, "different series", "export PMIX_MCA_gds=hash")
    mpilibs.enforce(warned, 1)
    mpilibs.enforce(MpiVerdict(PROCEED, True, "one series"), 0)
    assert capsys.readouterr().err == ""
    mpilibs.enforce(warned, 0)
    line = "ctrain: warning: different series Fix: export PMIX_MCA_gds=hash\n"
    assert capsys.readouterr().err == line


def test_doctor_reports_this_sides_mpi_and_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    record = {mpilibs.RECORD: "openmpi=4.1.4,pmix=4.2.2"}
    found = mpilibs.doctor_check(record)
    assert (found.name, found.status, found.fix) == ("mpi-match", "PASS", "")
    assert found.detail == (
        f"Open MPI 4.1.4, PMIx 4.2.2 ({mpilibs.RECORD}); "
        "not checked: no PMIx server or Open MPI mpirun set this rank up"
    )
    assert mpilibs.doctor_check({**record, **LAUNCHERS["slurm-pmix4"]}).status == "PASS"
    found = mpilibs.doctor_check({**record, **LAUNCHERS["slurm-pmix3"]})
    assert found.status == "WARN" and "PMIx 3.2.3" in found.detail
    assert "PMIX_MCA_gds=hash" in found.fix
    found = mpilibs.doctor_check({**record, **LAUNCHERS["prrte-5.0"]})
    assert found.status == "FAIL" and "does not mix major releases" in found.detail and found.fix


def test_doctor_as_a_rank_on_gloo_alone_does_not_check() -> None:
    """horovodrun --gloo's rank, and a rank of Hydra's (ctrain plans Gloo there): the same rule
    as the launch's plan (launch/gloo.on_gloo_alone)."""
    record = {mpilibs.RECORD: "openmpi=4.1.4,pmix=4.2.2"}
    horovodrun_gloo = {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2", "HOROVOD_CONTROLLER": "gloo"}
    hydra = {"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
    step = {**record, **LAUNCHERS["slurm-pmix1"]}  # inherited from the srun task they run in
    assert mpilibs.doctor_check(step).status == "FAIL"
    for launcher in (horovodrun_gloo, hydra):
        found = mpilibs.doctor_check({**step, **launcher})
        assert (found.status, found.fix) == ("PASS", "")
        assert found.detail.endswith("; not checked: Horovod runs on Gloo")


# ---- the real CLI: `ctrain launch` in a fresh interpreter, the image's MPI given as a record

DEBIAN12 = {mpilibs.RECORD: "openmpi=4.1.4,pmix=4.2.2"}


def launch_env(launcher: str, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), **LAUNCHERS[launcher], **DEBIAN12, **extra}


def test_explain_json_shows_the_verdict() -> None:
    env = launch_env("slurm-pmix4")
    done = run_ctrain("launch", "--mode", "horovod", "--explain", "--json", env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["mpi_check"] == {
        "status": "proceed",
        "checked": True,
        "message": "Slurm's PMIx server (srun --mpi=pmix), PMIx 4.2.2rc2, and the image's "
        "PMIx 4.2.2: one release series, via PMIX_SERVER_URI41",
        "fix": "",
    }
    plain = {k: v for k, v in env.items() if not k.startswith(("PMIX_", "SLURM_MPI"))}
    done = run_ctrain("launch", "--explain", "--json", env=plain, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["mpi_check"] == {
        "status": "proceed",
        "checked": False,
        "message": "not checked: mode multiworker does not use MPI",
        "fix": "",
    }


def test_a_refusal_stops_the_launch_before_the_command_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    env = launch_env("prrte-5.0")
    done = run_ctrain("launch", "--mode", "horovod", "--", *command, env=env, timeout=60)
    assert done.returncode == LaunchError.exit_code == 4
    assert done.stderr.splitlines() == [
        "ctrain: error: the host's mpirun (PRRTE: Open MPI 5 or newer) cannot start the image's "
        "Open MPI 4.1.4: Open MPI does not mix major releases Fix: use the image's own mpirun "
        "inside one container (ctrain exec --no-launch IMAGE -- mpirun ...); or a host mpirun "
        "of Open MPI 4.x; or srun --mpi=pmix"
    ]
    assert not marker.exists()
    done = run_ctrain("launch", "--mode", "horovod", "--explain", "--json", env=env, timeout=60)
    assert done.returncode == 4 and done.stdout == ""
    off = launch_env("prrte-5.0", CTRAIN_SKIP_MPI_CHECK="true")
    done = run_ctrain("launch", "--mode", "horovod", "--", *command, env=off, timeout=60)
    assert done.returncode == 0, done.stderr
    assert marker.exists()


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_warning_is_one_line_from_rank_0_and_the_launch_goes_on(
    rank: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    env = launch_env("orte-4.1-pmix3", OMPI_COMM_WORLD_RANK=rank, OMPI_COMM_WORLD_LOCAL_RANK=rank)
    done = run_ctrain("launch", "--mode", "horovod", "--", *command, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert marker.exists()
    warnings = [line for line in done.stderr.splitlines() if line.startswith("ctrain: warning:")]
    if rank == "0":
        assert len(warnings) == 1, done.stderr
        assert "PMIx 3.2.3, and the image's PMIx 4.2.2 are different release series" in warnings[0]
    else:
        assert warnings == [], done.stderr
