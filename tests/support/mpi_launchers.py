"""What each MPI launcher gives a rank (srun --mpi=pmix of each PMIx series, Open MPI's mpirun
of each generation), for the MPI check's tests (launch/mpicheck.py, launch/mpilibs.py)."""

from __future__ import annotations

from tests.support.environs import STEP2


def pmix_server(version: str | None, *suffixes: str, **extra: str) -> dict[str, str]:
    """What PMIx_server_setup_fork of a server of ``version`` gives rank 1."""
    env = {
        "PMIX_NAMESPACE": "slurm.pmix.77.0",
        "PMIX_RANK": "1",
        "PMIX_SECURITY_MODE": "munge,native",
        "PMIX_GDS_MODULE": "ds21,ds12,hash",
        "PMIX_HOSTNAME": "vm",
        **{f"PMIX_SERVER_URI{s}": "pmix-server.4242;tcp4://127.0.0.1:40000" for s in suffixes},
        **extra,
    }
    if version is not None:  # PMIx 1.x and 2.x do not say their release
        env["PMIX_VERSION"] = version
    return env


V4_URIS = ("41", "4", "3", "21", "2")  # PMIx 4.1 to 5.0: their listener's list
SLURM = {**STEP2, "SLURM_MPI_TYPE": "pmix"}
ORTE = {
    "OMPI_COMM_WORLD_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "2",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    "OMPI_COMM_WORLD_NODE_RANK": "1",
    "OMPI_UNIVERSE_SIZE": "2",
    "OMPI_MCA_ess": "^singleton",
    "OMPI_MCA_pmix": "^s1,s2,cray,isolated",
    "OMPI_MCA_orte_ess_num_procs": "2",
    "OMPI_MCA_orte_hnp_uri": "1406992384.0;tcp://10.0.0.1:55211",
    "OMPI_MCA_orte_launch": "1",
}
PRRTE = {k: v for k, v in ORTE.items() if not k.startswith("OMPI_MCA_")}
PRRTE |= {"OMPI_APP_SIZES": "2", "OMPI_WORLD_SIZE": "2", "OMPI_WORLD_LOCAL_SIZE": "2"}

LAUNCHERS: dict[str, dict[str, str]] = {
    # srun --mpi=pmix on Slurm 22.05 built with PMIx 4.2.2 (Debian 12: this machine)
    "slurm-pmix4": {**SLURM, **pmix_server("4.2.2rc2", *V4_URIS)},
    # srun --mpi=pmix_v3: Slurm's plugin linked with PMIx 3.2 (tcp listener: 3, 2, 21)
    "slurm-pmix3": {**SLURM, "SLURM_MPI_TYPE": "pmix_v3", **pmix_server("3.2.3", "3", "2", "21")},
    # srun --mpi=pmix_v2 with PMIx 2.2: tcp (2, 21) and usock (plain) listeners, no PMIX_VERSION
    "slurm-pmix2": {**SLURM, "SLURM_MPI_TYPE": "pmix_v2", **pmix_server(None, "2", "21", "")},
    # srun --mpi=pmix_v1 (Slurm 16.05 to 17.11) with PMIx 1.2: the plain variable only
    "slurm-pmix1": {**SLURM, "SLURM_MPI_TYPE": "pmix_v1", **pmix_server(None, "")},
    # srun --mpi=pmix_v5 with PMIx 5.0
    "slurm-pmix5": {**SLURM, "SLURM_MPI_TYPE": "pmix_v5", **pmix_server("5.0.3", *V4_URIS)},
    # srun --mpi=pmix_v6 with PMIx 6.1: one variable per wire component, by its name
    "slurm-pmix6.1": {
        **SLURM,
        "SLURM_MPI_TYPE": "pmix_v6",
        **pmix_server("6.1.0", "61", "51", "41", "4", "3", "21", "20", "12"),
    },
    # Open MPI 4.1.4's mpirun with Debian's PMIx 4.2.2 (this machine), inside a batch job
    "orte-4.1-pmix4": {**STEP2, **ORTE, **pmix_server("4.2.2rc2", *V4_URIS)},
    # Open MPI 4.1 built with its own PMIx 3.2
    "orte-4.1-pmix3": {**STEP2, **ORTE, **pmix_server("3.2.3", "3", "2", "21")},
    # Open MPI 3.1 with its own PMIx 2.1: no PMIX_VERSION
    "orte-3.1": {**ORTE, **pmix_server(None, "2", "21")},
    # Open MPI 5.0's mpirun (prterun) with PMIx 5.0
    "prrte-5.0": {**PRRTE, **pmix_server("5.0.3", *V4_URIS)},
}
