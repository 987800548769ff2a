"""The host's environment every invocation in tests/unit/golden/runtimes.json is planned in:
test_runtimes writes the golden file from it, and test_golden_oracles runs its argv in it."""

from __future__ import annotations

HOST_ENV = {
    "PATH": "/usr/bin",
    "HOME": "/home/u",
    "PYTHONPATH": "/home/u/leak",
    "LD_LIBRARY_PATH": "/opt/leak",
    "SLURM_JOB_ID": "42",
    "SLURM_PROCID": "1",
    "OMPI_COMM_WORLD_RANK": "1",
    "PMIX_RANK": "1",
    "NCCL_DEBUG": "INFO",
    "HOROVOD_FUSION_THRESHOLD": "0",
    "CUDA_VISIBLE_DEVICES": "2,3",
    "CTRAIN_MODE": "auto",
    "TF_CLI_CONFIG_FILE": "/terraform/is/not/tensorflow",
    "USER": "u",
    "LANG": "de_DE.UTF-8",  # the image's locale stays
    "CUDA_HOME": "/opt/host-cuda",  # a host path: the image's CUDA counts inside
}
