"""The one stand-in for pyxis (NVIDIA's srun plugin) and enroot in ctrain's tests; its parts
live in tests/support/standin_pyxis/ (srun, options, task: pyxis; enroot: enroot's import). pyxis
cannot be installed here (it is a plugin built against the site's Slurm, and enroot needs its
own setup); every behaviour below cites its source in
docs/pyxis-facts.md (section in brackets), which cites pyxis' and enroot's code and docs.

It is an ``srun`` first on PATH: it reads pyxis' options, then runs the REAL srun with the
other options, and in each task a small wrapper in front of the command, so a job script runs
a real Slurm step through it. It is not a container: the command runs on the host, in the
environment and working directory pyxis would give it, so a wrong option, mount or variable
fails here as it would on a pyxis cluster.

Steering (FAKE_PYXIS_*): IMAGE_ENV (JSON: the image's environment, default none),
IMAGE_WORKDIR (the image's working directory, default /), LOG (a file: one JSON line per task
with image, mounts, workdir, command and the environment it got; ``calls`` reads them).

Modelled:
- [Options] the pyxis options with and without a value, ``--opt=value`` and ``--opt value``;
  an unknown ``--container-*`` option or a missing/extra value refused as srun's getopt does;
  --container-image and --container-workdir: required value, given twice only with the same
  value; --container-mounts: comma-separated ``SRC[:DST[:FLAGS]]``, FLAGS joined by ``+``, a
  source that is not a path (nor tmpfs/umount) or a target that is not a path refused, an empty
  part refused, duplicates dropped, repeatable; --container-env: comma-separated names, an
  empty one refused; --[no-]container-mount-home: both refused; PYXIS_CONTAINER_IMAGE, _MOUNTS,
  _WORKDIR, _ENV when the option is not given; without an image the other options are ignored
  with an error line each and srun runs plainly. Refusals exit 1 (srun's own exit status for a
  plugin's refusal is not modelled beyond non-zero).
- [Image] a reference starting with ``.`` or ``/`` is a squashfs file: it must exist and start
  with the squashfs magic, else "failed to create container filesystem"; a registry reference
  is not fetched (its environment and working directory come from FAKE_PYXIS_IMAGE_*).
- [A task] the host's environment minus LANG, LANGUAGE and LC_ALL (unless named in
  --container-env), then the image's values over it, except for names in --container-env the
  host has; working directory: --container-workdir (missing: the task fails, "No such file or
  directory"), else the image's; mounts: an absolute source must exist ("source path does not
  exist"); a mount the host cannot already show (another destination, or ``ro``) is a real bind
  mount inside ``unshare --mount`` (root only; a destination the host lacks is made as
  ``x-create=auto`` makes it, in an overlay on a tmpfs, never on the host); the
  command is exec'd (same pid: srun's signals reach it; its exit status is the task's).
Not modelled (refused with a "stand-in:" error rather than ignored): --container-name, -save,
-remap-root, -entrypoint, -entrypoint-log, -writable, -readonly, -unshare, their PYXIS_CONTAINER_*
variables, tmpfs/umount mounts, relative mount paths. Not shown: the image's filesystem (the
command sees the host's), --container-mount-home (the host's home is visible anyway), GPUs
(enroot's NVIDIA hook), pyxis' own import of a registry image in each step (the stand-in
never imports: see FAKE_PYXIS_IMAGE_*), and the per-node container shared by a step's tasks.
Timing and resource use are not pyxis'. ``srun --help`` prints the real srun's help followed by
one line per pyxis option ([Is pyxis there?]), not pyxis' own texts.

The enroot stand-in (``install_enroot``: an ``enroot`` program) models [enroot import]:
``enroot version``; ``enroot import [-a ARCH] [-o OUTPUT] [--] URI`` with enroot's argument
checks (usage error, exit 1), ``docker://[USER@][REGISTRY#]IMAGE[:TAG]`` only (dockerd://,
podman:// and the other commands are refused with a "stand-in:" error), enroot's settings from
the environment with their $HOME/XDG defaults and "no" values unset, the three directories it
creates on start, "File already exists" for an existing output, HTTPS unless
ENROOT_ALLOW_HTTP; then, for real: the manifest list request (only 401/404 ignored), the amd64
manifest, config and layer blobs fetched once into ENROOT_CACHE_PATH, layers unpacked in order
with whiteouts under ENROOT_TEMP_PATH, /etc/environment and the provenance line of /etc/rc
written, and the file made by the real mksquashfs with -all-root and ENROOT_SQUASH_OPTIONS.
Not modelled: registry authentication and credentials, digests in the URI, -a (read, not
used), zstd layers, device files in layers (skipped), /etc/fstab, the rest of /etc/rc, and
enroot's overlay-based squashing (the layers are unpacked into one tree instead).
Steering: FAKE_ENROOT_LOG (a file: one JSON line per call, argv and the ENROOT_* variables),
FAKE_ENROOT_HOLD (a file: write the start of the output, create the file, then block until a
signal ends the process: an import interrupted half-way).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout holding tests/support/standin_pyxis


def install(bin_dir: Path) -> Path:
    """Put the stand-in in ``bin_dir`` as ``srun``, in front of the real one."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    real = shutil.which("srun", path="/usr/local/bin:/usr/bin:/bin")
    if real is None:
        raise FileNotFoundError("no real srun to run behind the pyxis stand-in")
    program = bin_dir / "srun"
    program.write_text(
        f"#!{sys.executable} -IS\nimport os, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.support.standin_pyxis.srun import main\n"
        f"sys.exit(main(sys.argv, dict(os.environ), {real!r}))\n"
    )
    program.chmod(0o755)
    return program


def install_enroot(bin_dir: Path) -> Path:
    """Put the enroot stand-in (``version`` and ``import``) in ``bin_dir`` as ``enroot``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    program = bin_dir / "enroot"
    program.write_text(
        f"#!{sys.executable} -IS\nimport os, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from tests.support.standin_pyxis.enroot import main\n"
        "sys.exit(main(sys.argv, dict(os.environ)))\n"
    )
    program.chmod(0o755)
    return program


def calls(log_file: Path) -> list[dict[str, object]]:
    """One line per task started through the stand-in, in order."""
    if not log_file.exists():
        return []
    return [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]
