"""One job request per golden job script (tests/unit/golden/jobs): every mode, and the options
that change each line."""

from __future__ import annotations

from ctrain.slurm.request import JobRequest

WEIRD = ("python", "my train.py", "--note", 'it\'s a "test"\n$HOME `id` ;|&', "--lr=0.1")

CASES: dict[str, JobRequest] = {
    "single-defaults": JobRequest("single", ("python", "train.py")),
    "single-cpu-host": JobRequest(
        "single",
        ("python", "train.py", "--epochs", "3"),
        gpus_per_node=0,
        cpus_per_task=2,
        mem="4G",
        time="30",
        runtime="host",
        signal_seconds=120,
    ),
    "mirrored-8gpu": JobRequest(
        "mirrored",
        WEIRD,
        gpus_per_node=8,
        cpus_per_task=64,
        mem="512G",
        time="2-00:00:00",
        partition="gpu,a100",
        account="proj_42",
        job_name="resnet50.mirrored",
        image="/scratch/me/images/ctrain 0.1.0.sif",
        runtime="apptainer",
    ),
    "multiworker-4x4": JobRequest(
        "multiworker",
        ("python", "train.py"),
        nodes=4,
        gpus_per_node=4,
        time="12:00:00",
        partition="gpu",
        image="docker://registry.example.org/lab/ctrain:0.1.0-gpu",
    ),
    "multiworker-cpu": JobRequest(
        "multiworker",
        WEIRD,
        nodes=1,
        gpus_per_node=0,
        tasks_per_node=2,
        cpus_per_task=1,
        mem="2G",
        time="10:00",
        runtime="host",
        signal_seconds=30,
    ),
    "horovod-srun-2x8": JobRequest(
        "horovod-srun", ("python", "train.py"), nodes=2, gpus_per_node=8, account="lab"
    ),
    "horovod-mpirun-2x4": JobRequest(
        "horovod-mpirun",
        ("python", "-u", "train.py", "--data", "/data/imagenet"),
        nodes=2,
        gpus_per_node=4,
        time="1-12",
        runtime="docker",
        nv=True,
    ),
    # pyxis: srun --container-* steps (GPU variants, a squashfs file on CPU nodes)
    "multiworker-pyxis-2x4": JobRequest(
        "multiworker",
        ("python", "train.py"),
        nodes=2,
        gpus_per_node=4,
        image="docker://nvcr.io/lab/ctrain:0.1.0-gpu",
        runtime="pyxis",
    ),
    "horovod-srun-pyxis-2x8": JobRequest(
        "horovod-srun", WEIRD, nodes=2, gpus_per_node=8, runtime="pyxis", account="lab"
    ),
    "single-pyxis-cpu": JobRequest(
        "single",
        ("python", "train.py"),
        gpus_per_node=0,
        cpus_per_task=2,
        mem="4G",
        time="30",
        image="/scratch/me/ctrain 0.1.0.sqsh",
        runtime="pyxis",
    ),
    # --check-network: the network check as the first step (test_network_job.py)
    "multiworker-2x4-check-network": JobRequest(
        "multiworker", ("python", "train.py"), nodes=2, gpus_per_node=4, check_network=True
    ),
    "horovod-mpirun-2x4-check-network": JobRequest(
        "horovod-mpirun",
        ("python", "train.py"),
        nodes=2,
        gpus_per_node=4,
        runtime="docker",
        check_network=True,
    ),
    "horovod-srun-pyxis-2x8-check-network": JobRequest(
        "horovod-srun",
        ("python", "train.py"),
        nodes=2,
        gpus_per_node=8,
        runtime="pyxis",
        check_network=True,
    ),
    # --profile: CTRAIN_PROFILE for every rank's ctrain launch
    "horovod-srun-2x4-profile": JobRequest(
        "horovod-srun", ("python", "train.py"), nodes=2, gpus_per_node=4, profile="20-25"
    ),
}
