"""ctrain as a user outside the checkout has it (issue 18): the wheel built from this checkout,
installed into a fresh venv without the `train` extra, answers every command from its package
data alone; the same wheel, beside this venv's TensorFlow, runs `ctrain bench` under srun with
the benchmark it ships. (The CPU image's bench is in test_built_images.py.)

One wheel per session; click comes from PyPI into the CLI-only venv."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from ctrain.cli import COMMANDS
from tests.support.helpers import REPO
from tests.support.real_runs import TINY, check_outputs, clean_env

INSTALL_TIMEOUT = 600


def _check(argv: Sequence[str], timeout: float = INSTALL_TIMEOUT) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # pip: only the venv's
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ctrain's wheel from this checkout (pip wheel, isolated build)."""
    out = tmp_path_factory.mktemp("wheel")
    t0 = time.monotonic()
    _check([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)])
    print(f"pip wheel: {time.monotonic() - t0:.0f} s")
    (found,) = out.glob("ctrain_hpc-*.whl")
    return found


def venv_with(wheel: Path, root: Path, *pip_args: str) -> Path:
    """A fresh venv (no system site-packages) with the wheel installed; its bin directory."""
    t0 = time.monotonic()
    _check([sys.executable, "-m", "venv", str(root)])
    _check([str(root / "bin" / "python"), "-m", "pip", "install", "-q", *pip_args, str(wheel)])
    print(f"venv with the wheel ({' '.join(pip_args) or 'with dependencies'}): "
          f"{time.monotonic() - t0:.0f} s")  # fmt: skip
    return root / "bin"


def user_env(bin_dir: Path) -> dict[str, str]:
    """A user's shell with that venv first on PATH: no PYTHONPATH to the checkout."""
    env = clean_env()
    env.pop("PYTHONPATH", None)
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


def run(
    bin_dir: Path, *argv: str, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / argv[0]), *argv[1:]],
        env=user_env(bin_dir),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def cli_only(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return venv_with(wheel, tmp_path_factory.mktemp("cli-only") / "venv")


def test_the_cli_only_install_answers_every_command(cli_only: Path, tmp_path: Path) -> None:
    where = run(cli_only, "python", "-c", "import ctrain; print(ctrain.__file__)", cwd=tmp_path)
    assert where.stdout.startswith(str(cli_only.parent)), where.stdout  # the wheel's, not ours
    absent = run(cli_only, "python", "-c", "import tensorflow", cwd=tmp_path)
    assert absent.returncode != 0  # no train extra
    for command in ["--help", *(f"{name} --help" for name in COMMANDS)]:
        done = run(cli_only, "ctrain", *command.split(), cwd=tmp_path)
        assert done.returncode == 0 and "Usage:" in done.stdout, f"{command}: {done.stderr}"
    rendered = run(cli_only, "ctrain", "job", "render", "multiworker", "--", "python", "t.py",
                   cwd=tmp_path)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    assert "#SBATCH --nodes=" in rendered.stdout and "python t.py" in rendered.stdout
    shown = run(cli_only, "ctrain", "config", "show", cwd=tmp_path)
    assert shown.returncode == 0 and "bench_script" in shown.stdout, shown.stderr
    doctor = run(cli_only, "ctrain", "doctor", "--json", cwd=tmp_path)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert doctor.returncode in (0, 1) and "tensorflow" in {n.lower() for n in checks}
    listed = run(cli_only, "ctrain", "examples", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "mnist_cnn.py",
        "resnet50_transfer.py",
    ]
    copied = run(cli_only, "ctrain", "examples", "copy", "mine", cwd=tmp_path)
    assert copied.returncode == 0, copied.stderr
    assert (tmp_path / "mine" / "mnist_cnn.py").read_bytes() == (
        REPO / "examples" / "mnist_cnn.py"
    ).read_bytes()
    helped = run(cli_only, "python", "-m", "ctrain.bench.synthetic", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "--num-iters" in helped.stdout, helped.stderr
    # what the carried launcher needs from the installed package: the boot script, and the
    # `ctrain` shim it runs, executable (a wheel keeps the mode only if the build recorded it)
    container = Path(where.stdout.strip()).parent / "container"
    assert (container / "boot.sh").is_file()
    assert os.access(container / "bin" / "ctrain", os.X_OK)
    mounts = run(cli_only, "ctrain", "carried", cwd=tmp_path)
    assert mounts.stdout.startswith(f"{container.parent}:/opt/ctrain-carried/api/ctrain:ro,")


@pytest.mark.slurm
@pytest.mark.tensorflow
def test_the_wheels_bench_runs_under_srun(
    wheel: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The wheel in a venv that sees this venv's TensorFlow and matplotlib through a .pth file
    (its packages come after the wheel's, and this venv's own ctrain is not on the path). The
    outputs are checked as test_bench_real.py's: this is the unprofiled auto-mode bench."""
    bin_dir = venv_with(wheel, tmp_path_factory.mktemp("with-tf") / "venv", "--no-deps")
    site = run(bin_dir, "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
               cwd=tmp_path).stdout.strip()  # fmt: skip
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(site, "ctrain-test-tensorflow.pth").write_text("".join(f"{p}\n" for p in ours))
    where = run(bin_dir, "python", "-c", "import ctrain, tensorflow; print(ctrain.__file__)",
                cwd=tmp_path)  # fmt: skip
    assert where.stdout.startswith(site), f"{where.stdout}{where.stderr}"
    t0 = time.monotonic()
    done = run(bin_dir, "ctrain", "bench", "--workers", "1,2", "--launcher", "srun", *TINY,
               "--out", "out", cwd=tmp_path, timeout=600)  # fmt: skip
    print(f"ctrain bench --workers 1,2 from the wheel: {time.monotonic() - t0:.0f} s")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    check_outputs(tmp_path / "out", ["single", "multiworker"])
    log = (tmp_path / "out" / "logs" / "w2.log").read_text()
    assert f"{bin_dir / 'python'} -m ctrain.bench.synthetic" in log.splitlines()[0]
