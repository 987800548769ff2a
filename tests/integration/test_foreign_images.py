"""Images without ctrain in them, as users have them: ``ctrain exec`` carries its launcher in
(container/carry.py) and runs it on the image's own Python, or refuses in one line with the fix.

The foreign images are made here from what the suite already builds, once per run and in seconds
(layers on top of ctrain's CPU image, or of the busybox base), as no registry of the images users
meet (TensorFlow's, NGC's) can be reached from this machine:

- FOREIGN_HVD: Python + TensorFlow + Horovod + Open MPI, ctrain uninstalled, no entrypoint (like
  NGC's). Its Python is still where ctrain's recipe put it (/opt/ctrain/venv), and its labels are
  ctrain's: Docker cannot remove a label. Nothing here reads either.
- FOREIGN_TF: the same without Horovod (like TensorFlow's own ``-gpu`` images).
- NO_PYTHON: busybox only. OLD_PYTHON: busybox with a ``python3`` that answers 3.8 to the
  version question: a stand-in, which shows the refusal, not that a real 3.8 would fail later.

Each through Docker, one process and two ranks under ``srun``; FOREIGN_HVD through Apptainer too,
as a SIF (lz4: a few seconds to make from the image's tree), as root with Horovod under
``srun --mpi=pmix`` (as the unprivileged test user: test_remote_real.py's job submitted from a
"laptop", two ranks of multiworker).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import ctrain
from ctrain import matrix
from tests.support.helpers import CTRAIN, REGISTRY, run_ctrain
from tests.support.images import DEFAULT, busybox_base, foreign
from tests.support.images.foreign import layered
from tests.support.podman_cli import podman, present
from tests.support.real_runs import SCRIPTS, clean_env, reports, run
from tests.support.slurm_jobs import log, render, submit, wait_done

pytestmark = [pytest.mark.docker, pytest.mark.builds("foreign"), pytest.mark.timeout(600)]

OLD_PYTHON = """FROM {base}
RUN printf '#!/bin/sh\\necho 3.8\\n' >/bin/python3 && /bin/busybox chmod 755 /bin/python3
"""


@pytest.fixture(scope="module")
def foreign_hvd() -> str:
    return foreign.foreign_hvd()


@pytest.fixture(scope="module")
def foreign_tf() -> str:
    return foreign.foreign_tf()


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A working directory with the training script in it (the runtimes bind the working
    directory, not the checkout)."""
    shutil.copy(SCRIPTS / "train_tiny.py", tmp_path)
    return tmp_path


def ctrain_exec(runtime: str, image: str, *command: str) -> list[str]:
    return [CTRAIN, "exec", "--runtime", runtime, image, "--", *command]


def refused(done: subprocess.CompletedProcess[str], code: int, what: str) -> str:
    """The run ended with one ``ctrain: error: ... Fix: ...`` line saying ``what``."""
    lines = [line for line in done.stderr.splitlines() if line.startswith("ctrain: error:")]
    assert done.returncode == code and len(lines) == 1, done.stdout + done.stderr
    assert what in lines[0] and " Fix: " in lines[0], lines[0]
    return lines[0]


def same_weights(out: Path, size: int) -> list[dict[str, object]]:
    found = reports(out, size)
    assert all(r["weights"] == found[0]["weights"] for r in found), found
    return found


# ---- Docker ---------------------------------------------------------------------------------


def test_the_carried_launcher_runs_on_the_images_python(foreign_hvd: str, work: Path) -> None:
    """ctrain is the host's, carried read-only; click (ctrain's command line's) stays the
    launcher's: the script sees the image's own; the interpreter is the command's."""
    probe = (
        "import ctrain, click, os, sys; "
        "print(ctrain.__file__, click.__file__, sys.executable, os.environ['CTRAIN_CARRIED'])"
    )
    done = run(ctrain_exec("docker", foreign_hvd, "python", "-c", probe), clean_env(), cwd=work)
    ctrain_file, click_file, python, _ = done.stdout.split(" ", 3)
    assert ctrain_file == "/opt/ctrain-carried/api/ctrain/__init__.py"
    assert click_file.startswith("/opt/ctrain/venv/lib/"), done.stdout
    assert python == "/opt/ctrain/venv/bin/python"
    assert "(Python 3.11, the command's interpreter)" in done.stdout
    assert "ctrain: mode=single" in done.stderr
    # nothing of the launcher's is left writable in the image
    write = run(
        [CTRAIN, "exec", "--runtime", "docker", "--no-launch", foreign_hvd, "--", "sh", "-c",
         "touch /opt/ctrain-carried/api/ctrain/x 2>/dev/null && echo wrote || echo refused"],
        clean_env(), cwd=work,
    )  # fmt: skip
    assert write.stdout == "refused\n"
    # a command that runs ctrain itself (a job's network check) gets the carried copy
    version = run(ctrain_exec("docker", foreign_hvd, "ctrain", "--version"), clean_env(), cwd=work)
    assert version.stdout == f"ctrain, version {ctrain.__version__}\n"


def test_explain_says_which_python_runs_the_launcher_and_what_it_holds(
    foreign_tf: str, work: Path
) -> None:
    argv = [CTRAIN, "exec", "--explain", "--runtime", "docker", foreign_tf, "--", "python",
            "train_tiny.py", "out"]  # fmt: skip
    lines = run(argv, clean_env(), cwd=work).stdout.splitlines()
    assert lines[0].startswith("ctrain: mode=single "), lines
    assert (
        lines[1] == "  python /opt/ctrain/venv/bin/python (Python 3.11, the command's interpreter)"
    )
    assert lines[2].endswith("from /opt/ctrain-carried/api/ctrain (carried from the host)")
    assert lines[3].startswith(f"  holds tensorflow {DEFAULT}, keras 3.")
    assert lines[3].endswith(f", tf_keras {matrix.load()[0].tf_keras}, horovod missing"), lines[3]
    assert not (work / "out").exists()  # the command did not run


@pytest.mark.slurm
def test_two_ranks_of_multiworker_on_an_image_without_horovod(foreign_tf: str, work: Path) -> None:
    run(
        ["srun", "-n", "2", "-t", "5", "--kill-on-bad-exit=1",
         *ctrain_exec("docker", foreign_tf, "python", "train_tiny.py", "out", "2")],
        clean_env(), timeout=300, cwd=work,
    )  # fmt: skip
    found = same_weights(work / "out", 2)
    assert {r["mode"] for r in found} == {"multiworker"}


@pytest.mark.slurm
def test_horovod_mode_without_horovod_is_refused_before_the_script(
    foreign_tf: str, work: Path
) -> None:
    done = subprocess.run(
        ["srun", "--mpi=pmix", "-n", "2", "-t", "5",
         *ctrain_exec("docker", foreign_tf, "python", "train_tiny.py", "out")],
        env=clean_env(CTRAIN_MODE="horovod"), capture_output=True, text=True, timeout=300,
        cwd=work,
    )  # fmt: skip
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("ctrain: error:")]
    assert len(lines) == 2 and lines[0] == lines[1], done.stderr  # one line from each rank
    assert "has no Horovod" in lines[0] and "--mode multiworker" in lines[0]
    assert not (work / "out").exists()


@pytest.mark.parametrize("which", ["no-python", "old-python", "no-tensorflow"])
def test_an_image_ctrain_cannot_run_in_is_refused_in_one_line(which: str, work: Path) -> None:
    if which == "no-tensorflow":  # Python 3.11 without TensorFlow: ctrain's minimal image
        from tests.support.images import ctrain_min_image

        image, command = ctrain_min_image(), ("python3", "train_tiny.py", "out")
    else:
        image = busybox_base()
        if which == "old-python":
            image = layered("old-python", OLD_PYTHON, image)
        command = ("python3", "train_tiny.py", "out")
    done = subprocess.run(
        ctrain_exec("docker", image, *command), env=clean_env(), cwd=work,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    expected = {
        "no-python": (2, "python3 (the command's interpreter) is not in the image"),
        "old-python": (2, "is Python 3.8; ctrain's launcher needs Python 3.10 or newer"),
        "no-tensorflow": (4, "has no TensorFlow"),
    }[which]
    refused(done, *expected)
    assert not (work / "out").exists()


def test_no_python_at_all_names_what_was_looked_for(work: Path) -> None:
    done = subprocess.run(
        ctrain_exec("docker", busybox_base(), "sh", "-c", "echo ran"),
        env=clean_env(), cwd=work, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    refused(done, 2, "the image has no Python (no python3 or python on its PATH")
    assert "ran" not in done.stdout


# ---- Podman ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def foreign_tf_in_podman(foreign_tf: str) -> Iterator[str]:
    """FOREIGN_TF in podman's store, pulled by ctrain from the local registry (its layers below
    the last are the CPU image's, which the registry mostly holds already)."""
    ref = f"{REGISTRY}/{foreign_tf}"
    for argv in (["docker", "tag", foreign_tf, ref], ["docker", "push", ref]):
        subprocess.run(argv, capture_output=True, timeout=900, check=True)
    done = run_ctrain("pull", "--runtime", "podman", ref, env=clean_env(), timeout=900)
    assert done.returncode == 0, done.stderr
    try:
        yield ref
    finally:
        if present(ref):
            podman("rmi", ref, check=False)
        subprocess.run(["docker", "rmi", ref], capture_output=True, timeout=120)  # the tag only


@pytest.mark.podman
@pytest.mark.slurm
def test_two_ranks_of_multiworker_through_podman(foreign_tf_in_podman: str, work: Path) -> None:
    run(
        ["srun", "-n", "2", "-t", "5", "--kill-on-bad-exit=1",
         *ctrain_exec("podman", foreign_tf_in_podman, "python", "train_tiny.py", "out", "2")],
        clean_env(), timeout=300, cwd=work,
    )  # fmt: skip
    found = same_weights(work / "out", 2)
    assert {r["mode"] for r in found} == {"multiworker"}


# ---- Apptainer -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def foreign_sif() -> Path:
    return foreign.foreign_sif()


@pytest.mark.apptainer
@pytest.mark.slurm
@pytest.mark.horovod
def test_horovod_under_srun_pmix_in_a_foreign_sif(foreign_sif: Path, work: Path) -> None:
    run(
        ["srun", "--mpi=pmix", "-n", "2", "-t", "5", "--kill-on-bad-exit=1",
         *ctrain_exec("apptainer", str(foreign_sif), "python", "train_tiny.py", "out", "2")],
        clean_env(CTRAIN_MODE="horovod"), timeout=420, cwd=work,
    )  # fmt: skip
    found = same_weights(work / "out", 2)
    assert {r["mode"] for r in found} == {"horovod"}


@pytest.mark.apptainer
@pytest.mark.horovod
@pytest.mark.mpi
@pytest.mark.slurm
def test_a_rendered_horovod_mpirun_job_trains_in_a_foreign_sif(
    foreign_sif: Path, work: Path, jobs_to_cancel: list[str]
) -> None:
    """`ctrain job render --image FOREIGN.sif` under sbatch, unchanged: the host's mpirun starts
    one `ctrain exec` per rank, each carries the launcher into the SIF."""
    script = render(
        "horovod-mpirun", ["python", "train_tiny.py", "out", "2"], runtime="apptainer",
        image=str(foreign_sif), job_name="foreign",
    )  # fmt: skip
    job = submit(script, work, jobs_to_cancel)
    record = wait_done(job, work)
    assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0", log(work)
    found = same_weights(work / "out", 2)
    assert {r["mode"] for r in found} == {"horovod"}


# ---- the site's workflow: a SIF with Python, TensorFlow in an ext3 overlay -------------------


@pytest.fixture(scope="module")
def base_sif() -> Path:
    """FOREIGN_HVD without its venv: Debian's Python 3.11 and Open MPI, no TensorFlow (like a
    site's CUDA + Python SIF; images/foreign.py)."""
    return foreign.base_sif()


@pytest.fixture(scope="module")
def overlay() -> Path:
    """An ext3 overlay made by `ctrain overlay create`, TensorFlow installed into a venv in it
    from the wheelhouse (as a user installs it from an index), and /ext3/env.sh
    (images/foreign.py)."""
    return foreign.overlay_with_tensorflow()


@pytest.mark.apptainer
@pytest.mark.slurm
@pytest.mark.parametrize(
    "how",
    [
        ["--image-python", "/ext3/env/bin/python", "--", "python", "train_tiny.py", "out", "2"],
        ["--", "bash", "-c", "source /ext3/env.sh; python train_tiny.py out 2"],
    ],
    ids=["image-python", "source-env-sh"],
)
def test_two_ranks_on_a_base_sif_with_tensorflow_in_an_overlay(
    base_sif: Path, overlay: Path, how: list[str], work: Path
) -> None:
    """Both ranks share the overlay read-only; TensorFlow is the overlay's, the launcher's
    interpreter the one named, or the base image's python3 under `bash -c`."""
    bare = subprocess.run(
        ["apptainer", "exec", str(base_sif), "python3", "-c", "import tensorflow"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bare.returncode == 1 and "No module named 'tensorflow'" in bare.stderr
    run(
        ["srun", "-n", "2", "-t", "5", "--kill-on-bad-exit=1", CTRAIN, "exec", "--runtime",
         "apptainer", "--overlay", f"{overlay}:ro", str(base_sif), *how],
        clean_env(), timeout=420, cwd=work,
    )  # fmt: skip
    found = same_weights(work / "out", 2)
    assert {r["mode"] for r in found} == {"multiworker"}
    assert {r["python"] for r in found} == {"/ext3/env/bin/python"}
    assert all(str(r["tensorflow"]).startswith("/ext3/env/lib/") for r in found), found
