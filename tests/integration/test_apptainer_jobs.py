"""The job scripts on the real Apptainer (Debian's 1.4.5, `make system`) under the local Slurm,
with ctrain's CPU image (TensorFlow, Horovod, Open MPI inside) as `make image-cpu` builds it
where Apptainer is installed: the real `apptainer build` of definitions/ctrain-cpu.def (its
%post runs docker/install.sh, its %test `ctrain doctor`), its labels read back with `apptainer
inspect`, then pushed to the local registry with `apptainer push` (ORAS), as `make push` does.

The first job names the image as ``oras://127.0.0.1:5000/...``: its batch step pulls it once
through ctrain's pull (`ctrain resolve`) into a SIF in a cache every compute host sees, and
every rank runs that file (Apptainer's own APPTAINER_CONTAINER inside says so). Then, from the
same cache and with no second download: a multiworker job stopped by SIGUSR2, requeued and
resumed to the uninterrupted job's weights bit for bit; the single, mirrored and
horovod-mpirun scripts (the host's mpirun starting one `ctrain exec` per rank); and a Horovod
job (`srun --mpi=pmix`
into the container's Open MPI, the host's PMIx) on two compute hosts of partition `cluster`,
which cannot reach the registry: their batch step finds the image in the shared cache, as after
a `ctrain pull` on a login node. With an empty cache, the same job fails in its batch step with
ctrain's one-line error and fix, Apptainer's own "connection refused" in it, and no rank
starts. Every multi-rank job ends with identical weights on its ranks.

One SIF of about 900 MB per run: its build is the slow part (about 5 minutes on 2 cores); the
pull is a download.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain import references
from ctrain.images import sif_header
from ctrain.images.record import IMAGES_DIR, read_sidecar, sidecar_of
from tests.conftest import CLUSTER_PARTITION, cluster_dir
from tests.support.helpers import REGISTRY, need, registry_up
from tests.support.images import DEFAULT, LABEL_PINS, ci_cpu_sif, ci_cpu_sif_in_registry, pins
from tests.support.multinode import OPENMPI_ON_THE_CLUSTER
from tests.support.real_runs import BIN
from tests.support.slurm_jobs import (
    RESUMABLE,
    final_weights,
    holds,
    job_record,
    lines,
    log,
    render,
    sh,
    submit,
    wait_done,
    wait_held,
)

EPOCHS = 2  # the requeue test holds before epoch 1, step 5
pytestmark = [
    pytest.mark.apptainer,
    pytest.mark.docker,
    pytest.mark.slurm,
    pytest.mark.tensorflow,
    pytest.mark.builds("cpu-sif"),
    pytest.mark.timeout(1800),
]


@pytest.fixture(scope="module")
def remote_image() -> str:
    """The CPU SIF built from the definition, in the local registry as ``oras://...``."""
    need(registry_up(), f"no registry at {REGISTRY} (make services)")
    return ci_cpu_sif_in_registry()


def test_the_cpu_sif_is_built_from_the_definition_with_the_matrix_pins() -> None:
    built = ci_cpu_sif()
    print(f"apptainer build of definitions/ctrain-cpu.def: {built.seconds:.0f} s")
    assert "INFO:    Running post scriptlet" in built.output
    assert "INFO:    Running testscript" in built.output  # %test: ctrain doctor
    assert re.search(r"^PASS +horovod +\S+: MPI yes, Gloo yes", built.output, re.M), built.output
    shown = subprocess.run(
        ["apptainer", "inspect", "--json", str(built.path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    labels = json.loads(shown.stdout)["data"]["attributes"]["labels"]
    wanted = pins(DEFAULT, "cpu")
    assert {label: labels.get(label) for label in LABEL_PINS} == {
        label: wanted[pin] for label, pin in LABEL_PINS.items()
    }
    assert labels["io.ctrain.flavour"] == "cpu"
    assert labels["org.label-schema.usage.singularity.deffile.bootstrap"] == "docker-daemon"


@dataclasses.dataclass(frozen=True)
class Shared:
    root: Path  # under /var/tmp: every compute host sees it
    cache: Path  # ctrain's cache, shared by every job of the module

    def workdir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir()
        shutil.copy(RESUMABLE, path / "train.py")  # Apptainer binds the working directory
        return path

    def env(self, image: str, **extra: str) -> dict[str, str]:
        return {
            "CTRAIN_RUNTIME": "apptainer",
            "CTRAIN_IMAGE": image,
            "CTRAIN_CACHE_DIR": str(self.cache),
            "CTRAIN_MIN_FREE_GB": "1",
            **extra,
        }


@pytest.fixture(scope="module")
def shared() -> Iterator[Shared]:
    with cluster_dir() as root:
        root.chmod(0o755)
        yield Shared(root, root / "cache")


@pytest.fixture(scope="module")
def jobs() -> Iterator[list[str]]:
    submitted: list[str] = []
    yield submitted
    for job in submitted:
        subprocess.run(["scancel", job], capture_output=True, timeout=30)


def command(workdir: Path, epochs: int, *extra: str) -> list[str]:
    return ["python", str(workdir / "train.py"), str(workdir / "out"), str(epochs), *extra]


def run_job(mode: str, workdir: Path, env: dict[str, str], jobs: list[str], **options: str) -> Path:
    """``mode``'s job script to completion on Apptainer; its output directory."""
    script = render(mode, command(workdir, EPOCHS), runtime="apptainer", job_name=mode, **options)
    job = submit(script, workdir, jobs, **env)
    record = wait_done(job, workdir)
    assert record["JobState"] == "COMPLETED", log(workdir)
    assert record["ExitCode"] == "0:0" and record["Restarts"] == "0", log(workdir)
    return workdir / "out"


def check_ranks(out: Path, mode: str, sif_file: Path) -> None:
    """Both ranks trained to the end in ``mode``, inside ``sif_file``, to the same weights."""
    runs = lines(out / "runs.jsonl")
    assert sorted(r["rank"] for r in runs) == [0, 1], runs  # type: ignore[type-var]
    assert all(r["mode"] == mode and r["end"] == "done" for r in runs), runs
    assert {r["container"] for r in runs} == {str(sif_file)}, runs
    assert all(r["python"] != str(BIN / "python") for r in runs)  # the image's, not this venv's
    first, second = final_weights(out, 2)
    assert first == second


@dataclasses.dataclass(frozen=True)
class FirstJob:
    workdir: Path
    out: Path
    sif_file: Path  # the file the pull wrote


@pytest.fixture(scope="module")
def first(remote_image: str, shared: Shared, jobs: list[str]) -> FirstJob:
    """The multiworker job with the remote image and an empty cache: it pulls."""
    workdir = shared.workdir("first")
    out = run_job("multiworker", workdir, shared.env(remote_image), jobs)
    ref = remote_image  # oras:// is the form apptainer pull takes as it is
    return FirstJob(workdir, out, shared.cache / IMAGES_DIR / references.image_filename(ref))


def test_the_batch_step_pulls_once_and_every_rank_runs_the_sif(
    first: FirstJob, remote_image: str
) -> None:
    text = log(first.workdir, tail=0)
    assert text.count(f"pulling {remote_image} into {first.sif_file}") == 1, text
    head, size = first.sif_file.read_bytes()[:4096], first.sif_file.stat().st_size
    assert sif_header.sif_problem(head, size) is None
    record = read_sidecar(sidecar_of(first.sif_file))
    assert record is not None and record.ref == remote_image
    check_ranks(first.out, "multiworker", first.sif_file)
    assert [e["epoch"] for e in lines(first.out / "epochs.jsonl")] == list(range(EPOCHS))


# The time limit's warning (USR2 to the batch script, passed to the step) and Slurm's own
# requeue (SIGTERM to every task, through slurmstepd, ctrain exec and apptainer): both save at
# the signal and resume.
STOPS = {
    "usr2": ["scancel", "--signal=USR2", "--batch"],
    "sigterm": ["scontrol", "requeue"],
}


@pytest.mark.parametrize("stop", list(STOPS))
def test_a_requeued_job_resumes_to_the_uninterrupted_weights(
    stop: str, first: FirstJob, remote_image: str, shared: Shared, jobs: list[str]
) -> None:
    workdir = shared.workdir(f"requeue-{stop}")
    out = workdir / "out"
    script = render(
        "multiworker",
        command(workdir, EPOCHS, *holds("1:5")),
        runtime="apptainer",
        job_name=f"requeue-{stop}",
    )
    job = submit(script, workdir, jobs, **shared.env(remote_image))
    wait_held(job, out, 0, workdir)
    sh([*STOPS[stop], job])
    record = wait_done(job, workdir)
    assert record["JobState"] == "COMPLETED", log(workdir)
    assert record["Restarts"] == "1", log(workdir)
    runs = lines(out / "runs.jsonl")
    assert sorted((r["restart"], r["end"]) for r in runs) == [  # type: ignore[type-var]
        (0, "exit 75"),
        (0, "exit 75"),
        (1, "done"),
        (1, "done"),
    ]
    assert {r["container"] for r in runs} == {str(first.sif_file)}
    assert [e["epoch"] for e in lines(out / "epochs.jsonl")] == list(range(EPOCHS))
    assert final_weights(out, 2) == final_weights(first.out, 2)


ONE_HOST_MODES = {"single": ("single", 1), "mirrored": ("mirrored", 1)}
ONE_HOST_MODES["horovod-mpirun"] = ("horovod", 2)  # the host's mpirun, one ctrain exec per rank


@pytest.mark.horovod
@pytest.mark.mpi
def test_every_other_job_script_runs_the_sif_pulled_before(
    first: FirstJob, remote_image: str, shared: Shared, jobs: list[str]
) -> None:
    """single, mirrored and horovod-mpirun (the host's mpirun starts one `ctrain exec` per rank,
    the container's Open MPI talks to it), submitted together, each from the shared cache: every
    rank trains inside the SIF the first job pulled, and nothing is pulled again."""
    submitted = {}
    for mode, (_, ranks) in ONE_HOST_MODES.items():
        workdir = shared.workdir(mode)
        options = {"tasks_per_node": str(ranks)} if ranks > 1 else {}
        script = render(
            mode, command(workdir, EPOCHS), runtime="apptainer", job_name=mode, **options
        )
        submitted[mode] = (submit(script, workdir, jobs, **shared.env(remote_image)), workdir)
    for mode, (job, workdir) in submitted.items():
        launched, ranks = ONE_HOST_MODES[mode]
        record = wait_done(job, workdir)
        assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0", log(workdir)
        runs = lines(workdir / "out" / "runs.jsonl")
        assert sorted(r["rank"] for r in runs) == list(range(ranks)), runs  # type: ignore[type-var]
        assert all(r["mode"] == launched and r["end"] == "done" for r in runs), runs
        assert {r["container"] for r in runs} == {str(first.sif_file)}, runs
        assert len({str(w) for w in final_weights(workdir / "out", ranks)}) == 1
        assert "pulling" not in log(workdir, tail=0)


# ---- across the compute hosts of partition `cluster`: offline, the cache on a shared filesystem


CLUSTER = {"nodes": "2", "tasks_per_node": "1", "partition": CLUSTER_PARTITION}


def node_names(nodelist: str) -> list[str]:
    return sh(["scontrol", "show", "hostnames", nodelist]).split()


@pytest.mark.cluster
@pytest.mark.horovod
def test_an_image_pulled_before_runs_on_two_offline_hosts(
    first: FirstJob, remote_image: str, shared: Shared, jobs: list[str]
) -> None:
    """The compute hosts cannot reach the registry (127.0.0.1:5000 is their own loopback): the
    batch step's `ctrain resolve` finds the image pulled before in the shared cache, as after a
    `ctrain pull` on a login node, and each rank runs that file on its own host."""
    workdir = shared.workdir("two-hosts")
    out = run_job(
        "horovod-srun", workdir, shared.env(remote_image, **OPENMPI_ON_THE_CLUSTER), jobs, **CLUSTER
    )
    record = job_record(jobs[-1])
    assert record["NumNodes"] == "2" and len(node_names(record["NodeList"])) == 2
    check_ranks(out, "horovod", first.sif_file)
    assert "pulling" not in log(workdir, tail=0)


@pytest.mark.cluster
def test_an_image_not_pulled_fails_in_the_batch_step_with_the_fix(
    remote_image: str, shared: Shared, jobs: list[str]
) -> None:
    workdir = shared.workdir("not-pulled")
    env = {**shared.env(remote_image), "CTRAIN_CACHE_DIR": str(workdir / "empty-cache")}
    script = render(
        "multiworker", command(workdir, 1), runtime="apptainer", job_name="not-pulled", **CLUSTER
    )
    job = submit(script, workdir, jobs, **env)
    record = wait_done(job, workdir)
    text = log(workdir, tail=0)
    assert record["JobState"] == "FAILED" and record["ExitCode"] != "0:0", text
    errors = [line for line in text.splitlines() if line.startswith("ctrain: error:")]
    assert len(errors) == 1, text
    assert "connection refused" in errors[0].lower(), text  # Apptainer's own, offline for real
    assert f"pull it once on a login node, ctrain pull {remote_image}," in errors[0]
    assert "Traceback" not in text
    assert not (workdir / "out").exists()  # no rank started
