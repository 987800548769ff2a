"""Images without ctrain in them, as users have them, layered on ctrain's CPU image
(tests/integration/test_foreign_images.py says what each stands for):

- FOREIGN_HVD: Python + TensorFlow + Horovod + Open MPI, ctrain uninstalled, no entrypoint;
- FOREIGN_TF: the same without Horovod;
- FOREIGN_HVD as a SIF (lz4), readable by the unprivileged test user;
- that SIF without its venv (a site's Python SIF), and an ext3 overlay with TensorFlow installed
  into a venv in it (the site's workflow).

Each is a ``background.once`` build (marker ``builds("foreign")``)."""

from __future__ import annotations

import atexit
import hashlib
import shutil
import subprocess
from pathlib import Path

from tests.support import scratch
from tests.support.helpers import CTRAIN, ctrain_env
from tests.support.real_runs import clean_env

from . import DEFAULT, REPO, ci_cpu_image
from .background import once, run

PIP = "/opt/ctrain/venv/bin/python -m pip uninstall --yes --quiet"
FOREIGN_HVD = f"""FROM {{base}}
RUN {PIP} ctrain-hpc && ! test -e /opt/ctrain/venv/bin/ctrain
ENTRYPOINT []
CMD ["python3"]
"""
FOREIGN_TF = f"""FROM {{base}}
RUN {PIP} horovod
"""
SIF_TIMEOUT = 900
ENV_SH = "export PATH=/ext3/env/bin:$PATH\n"  # what a site's /ext3/env.sh does, in one line


def layered(name: str, dockerfile: str, base: str) -> str:
    """``dockerfile`` on ``base`` as ctrain-test/NAME:HASH (built when that tag is missing)."""
    base_id = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", base],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    text = dockerfile.format(base=base)
    tag = f"ctrain-test/{name}:{hashlib.sha256((text + base_id).encode()).hexdigest()[:12]}"
    # An earlier generation (another base, another recipe) would keep its base's 3 GB alive.
    listed = subprocess.run(
        ["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", f"ctrain-test/{name}"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    for stale in set(listed) - {tag}:
        subprocess.run(["docker", "rmi", stale], capture_output=True, timeout=120)
    have = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, timeout=60)
    if have.returncode != 0:
        done = run(["docker", "build", "--network", "none", "-t", tag, "-"], input=text,
                   timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    return tag


@once
def foreign_hvd() -> str:
    return layered("foreign-hvd", FOREIGN_HVD, ci_cpu_image())


@once
def foreign_tf() -> str:
    return layered("foreign-tf", FOREIGN_TF, foreign_hvd())


@once
def foreign_sif() -> Path:
    """FOREIGN_HVD as a SIF under /var/tmp (the test user reaches it; the checkout may be
    private), removed when the run ends."""
    image = foreign_hvd()
    directory = scratch.make("foreign")
    atexit.register(shutil.rmtree, directory, True)
    directory.chmod(0o755)
    sif = directory / "foreign.sif"
    done = run(["apptainer", "build", "--mksquashfs-args", "-comp lz4", str(sif),
                f"docker-daemon://{image}"], timeout=SIF_TIMEOUT)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    sif.chmod(0o644)
    return sif


def squashfs_offset(sif: Path) -> int:
    """Where the root filesystem's squashfs starts in ``sif`` (`apptainer sif list`)."""
    done = run(["apptainer", "sif", "list", str(sif)], timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    (row,) = [line for line in done.stdout.splitlines() if "|FS (Squashfs" in line]
    return int(row.split("|")[3].split("-")[0])


@once
def base_sif() -> Path:
    """FOREIGN_HVD without its venv: Debian's Python 3.11 and Open MPI, no TensorFlow (like a
    site's CUDA + Python SIF), under /var/tmp, removed when the run ends. Its tree is unpacked by
    unsquashfs (Apptainer's own extraction, `build --sandbox`, cannot keep the files' owners
    here: root lacks the capability), and removed as soon as the SIF is built."""
    source = foreign_sif()
    directory = scratch.make("base-sif")
    atexit.register(shutil.rmtree, directory, True)
    tree, sif = directory / "tree", directory / "base.sif"
    try:
        done = run(["unsquashfs", "-q", "-n", "-o", str(squashfs_offset(source)), "-d",
                    str(tree), str(source)], timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        shutil.rmtree(tree / "opt" / "ctrain" / "venv")
        env = tree / ".singularity.d" / "env" / "10-docker2singularity.sh"
        env.write_text(env.read_text().replace("/opt/ctrain/venv/bin:", ""))
        done = run(["apptainer", "build", "--mksquashfs-args", "-comp lz4", str(sif), str(tree)],
                   timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        shutil.rmtree(tree, ignore_errors=True)  # the image's whole tree: gigabytes
    sif.chmod(0o644)
    return sif


@once
def overlay_with_tensorflow() -> Path:
    """An ext3 overlay made by `ctrain overlay create` under /var/tmp, TensorFlow installed into a
    venv in it from the wheelhouse (as a user installs it from an index) through ``base_sif``,
    and /ext3/env.sh; removed when the run ends."""
    wheels = REPO / "build" / "wheelhouse" / f"cpu-tf{DEFAULT}"
    assert (wheels / "SHA256SUMS").is_file(), f"{wheels}: the CPU image's build makes it"
    base = base_sif()
    directory = scratch.make("overlay")
    atexit.register(shutil.rmtree, directory, True)
    made = directory / "overlay.ext3"
    done = run([CTRAIN, "overlay", "create", str(made), "--size", "4G", "--sparse"],
               env=ctrain_env(clean_env()), timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    install = (
        "python3 -m venv /ext3/env && /ext3/env/bin/pip install --quiet --no-index "
        f"--find-links /wheels tensorflow=={DEFAULT} && printf '{ENV_SH}' >/ext3/env.sh"
    )
    # ctrain exec binds its working directory: the overlay's, as a user's would be
    done = run(["env", "-C", str(directory), CTRAIN, "exec", "--runtime", "apptainer",
                "--no-launch", "--overlay", str(made), "-B", f"{wheels}:/wheels:ro", str(base),
                "--", "sh", "-c", install], env=clean_env(), timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return made


def all_foreign() -> None:
    """Every foreign build (a background lane's step)."""
    foreign_tf()
    foreign_sif()
    base_sif()
    overlay_with_tensorflow()
