"""What the tests use and are not tests themselves: every helper module, fixture's data and
stand-in program lives here, so that everything else under tests/ is a test module (``test_*.py``),
a ``conftest.py``, an ``__init__.py`` or a training script of tests/scripts/
(tests/unit/test_layout.py holds the rule).

Shared by all tests:
- helpers: an isolated environment (``sandbox``), ctrain run as a process, ``wait_for``, a
  directory snapshot, the repository's paths;
- scratch: directories under /var/tmp that outlive one test, removed once their maker is gone;
- users: the one unprivileged user the tests run ctrain as.

Stand-ins for programs that cannot run here, installed in a sandbox's bin dir and run by the
tests' interpreter with the standard library only (``-I -S``; this file must import nothing):
- fake_apptainer (its parts in standin/): ``apptainer`` and ``singularity``;
- fake_pyxis (its parts in standin_pyxis/): pyxis' ``srun`` and enroot's ``enroot import``;
- fake_job_programs: srun, mpirun, scontrol and ctrain for the job scripts' unit tests;
- fake_rdma: sysfs trees of RDMA ports and a root with or without what RDMA needs.

The unit tests' data: bench_results, environs (a rank's environment under srun, a batch script,
Hydra), host_env, job_cases, mpi_launchers, nccl_logs, podman_facts, xspace.

The real tests' (tests/integration) helpers:
- images/: the test images, built once per source state in background lanes (``builds``);
- real_runs: a clean job environment, bounded runs, the training scripts of tests/scripts/ and
  the checks of their outputs;
- slurm_jobs: rendered job scripts on the local Slurm, sbatch/squeue/scontrol with bounded waits;
- multinode: the compute hosts of `make services NODES=3`; charliecloud_image: the Charliecloud
  image pulled once a session; podman_cli: podman with a timeout, as root or the test user;
  registry_push: a tiny image pushed to the local registry; passthrough: the environment case of
  the engines' exec tests; login_node: the tests' sshd with a second factor; fresh_state:
  scripts/fresh-state.sh's sandbox.
"""
