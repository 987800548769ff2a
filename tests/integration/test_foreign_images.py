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
``srun --mpi=pmix`` and as the unprivileged test user.
"""

from __future__ import annotations

import hashlib
import json
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import CTRAIN, REPO
from tests.users import TEST_USER

from .images import busybox_base, ci_cpu_image
from .jobs import SCRIPTS, clean_env, reports, run

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

PIP = "/opt/ctrain/venv/bin/python -m pip uninstall --yes --quiet"
FOREIGN_HVD = f"""FROM {{base}}
RUN {PIP} ctrain-hpc && ! test -e /opt/ctrain/venv/bin/ctrain
ENTRYPOINT []
CMD ["python3"]
"""
FOREIGN_TF = f"""FROM {{base}}
RUN {PIP} horovod
"""
OLD_PYTHON = """FROM {base}
RUN printf '#!/bin/sh\\necho 3.8\\n' >/bin/python3 && /bin/busybox chmod 755 /bin/python3
"""
RUNUSER = "/usr/sbin/runuser"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def layered(name: str, dockerfile: str, base: str) -> str:
    """``dockerfile`` on ``base`` as ctrain-test/NAME:HASH (built when that tag is missing)."""
    base_id = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", base],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    text = dockerfile.format(base=base)
    tag = f"ctrain-test/{name}:{hashlib.sha256((text + base_id).encode()).hexdigest()[:12]}"
    have = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60)
    if have.returncode != 0:
        done = subprocess.run(
            ["docker", "build", "--network", "none", "-t", tag, "-"],
            input=text, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    return tag


@pytest.fixture(scope="module")
def foreign_hvd() -> str:
    return layered("foreign-hvd", FOREIGN_HVD, ci_cpu_image())


@pytest.fixture(scope="module")
def foreign_tf(foreign_hvd: str) -> str:
    return layered("foreign-tf", FOREIGN_TF, foreign_hvd)


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
        from .images import ctrain_min_image

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


# ---- Apptainer -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def foreign_sif(foreign_hvd: str) -> Iterator[Path]:
    """FOREIGN_HVD as a SIF, readable by the test user."""
    with tempfile.TemporaryDirectory(dir="/var/tmp") as directory:
        Path(directory).chmod(0o755)
        sif = Path(directory) / "foreign.sif"
        subprocess.run(
            ["apptainer", "build", "--mksquashfs-args", "-comp lz4", str(sif),
             f"docker-daemon://{foreign_hvd}"],
            capture_output=True, text=True, timeout=900, check=True,
        )  # fmt: skip
        sif.chmod(0o644)
        yield sif


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
def test_a_plain_user_runs_a_foreign_sif(
    foreign_sif: Path, test_user: pwd.struct_passwd, tmp_path: Path
) -> None:
    """As the test user, from the source tree on Debian's Python: the carried ctrain is the
    checkout's, click Debian's; the SIF is extracted (no /dev/fuse for users here)."""
    work = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        shutil.copy(SCRIPTS / "train_tiny.py", work)
        shutil.chown(work, test_user.pw_uid, test_user.pw_gid)
        env = clean_env(
            HOME=test_user.pw_dir, PYTHONPATH=str(REPO / "src"), USER=TEST_USER,
            LOGNAME=TEST_USER, PATH=f"/usr/local/bin:{SYSTEM_PATH}",
        )  # fmt: skip
        argv = [RUNUSER, "-u", TEST_USER, "--", "/usr/bin/python3", "-m", "ctrain", "exec",
                "--runtime", "apptainer", str(foreign_sif), "--", "python", "train_tiny.py",
                "out", "1"]  # fmt: skip
        run(argv, env, timeout=420, cwd=work)
        report = json.loads((work / "out" / "rank0.json").read_text())
        assert report["mode"] == "single" and report["size"] == 1
        assert (work / "out" / "rank0.json").stat().st_uid == test_user.pw_uid
    finally:
        shutil.rmtree(work, ignore_errors=True)
