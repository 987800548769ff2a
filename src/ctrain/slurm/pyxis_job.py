"""The pyxis form of a job script: its step is ``srun --container-image=... BOOT -- COMMAND``,
ctrain's launcher carried into the container (container/carry.py) as ``ctrain exec`` carries it.

A template renders as for the other runtimes (slurm/jobs.py), then three of its parts change:
the runtime is fixed (the steps are written for pyxis, so CTRAIN_RUNTIME cannot switch them),
``exec_options`` goes (GPUs reach the container through enroot's NVIDIA hook, not ``--nv``),
and the step's ``ctrain exec IMAGE`` becomes pyxis' options around the carried boot script,
built in bash at run time from the job's directory, TMPDIR and ``ctrain carried`` (the mounts
of the batch step's own ctrain, read-only: the image needs no ctrain). The option names, the
variables kept from the host and ``--no-container-mount-home`` come from container/pyxis.py.
sbatch reads none of these options (they are srun's), so ``sbatch --test-only`` checks the
``#SBATCH`` lines only.
"""

from __future__ import annotations

import re

from ctrain.container import carry, pyxis
from ctrain.errors import CtrainError, JobRequestError
from ctrain.names import PYXIS
from ctrain.settings_table import BY_NAME

MPIRUN_MODE = "horovod-mpirun"
# The carried launcher's interpreter: the job's own image_python, its variable read as the step
# starts (the shell word)
IMAGE_PYTHON = f'"${{{BY_NAME["image_python"].env}:-}}"'

_RUNTIME = re.compile(
    r"^#[^\n]*\n#[^\n]*CTRAIN_RUNTIME in the environment wins\.\n"
    r"default_runtime=.*\nexport CTRAIN_RUNTIME=.*$",
    re.MULTILINE,
)
_EXEC_OPTIONS = re.compile(r"^# ctrain exec options:[^\n]*\nexec_options=\(.*\)$", re.MULTILINE)
_STEP = re.compile(
    r'^((?:#[^\n]*\n)*)step=\(srun (.*)ctrain exec "\$\{exec_options\[@\]\}" "\$image" -- "\$@"\)$',
    re.MULTILINE,
)

RUNTIME_LINES = f"""\
# The steps below are srun's with pyxis' --container-* options (ctrain job render --runtime
# pyxis wrote them): this runtime, whatever CTRAIN_RUNTIME says.
default_runtime={PYXIS}
export CTRAIN_RUNTIME=$default_runtime"""
GPU_LINE = "# GPUs: the step's reach the container through enroot's NVIDIA hook (no --nv)."


def block() -> str:
    """The bash that builds ``container_options`` (the image is the script's ``$image``)."""
    names = ",".join(pyxis.JOB_ENV)
    return f"""\
# pyxis (srun options; sbatch reads none of them): each task runs in a container enroot makes
# on its node from $image: for a docker:// image, the squashfs file ctrain resolve imported
# once above (enroot import into ctrain's cache), so the nodes do not each import it. It runs
# in this directory, mounted at the same path with the job's TMPDIR; the variables named in
# {pyxis.ENV} keep this script's values over the image's; the home directory stays out.
workdir=$PWD
mounts=$workdir:$workdir
if [ -d "${{TMPDIR:-}}" ] && [ "$TMPDIR" != /tmp ] && [ "$TMPDIR" != "$workdir" ]; then
    mounts+=",$TMPDIR:$TMPDIR"
fi
for path in "$workdir" "${{TMPDIR:-}}"; do
    if [[ $path == *[,:]* ]]; then
        echo "ctrain job: pyxis cannot mount $path (',' or ':' in it); run the job elsewhere" >&2
        exit 2
    fi
done
# ctrain's launcher, carried in read-only (the image needs no ctrain): this ctrain's package and
# click, mounted under {carry.ROOT}; the container runs its boot script, which finds the
# image's Python and runs ctrain launch with it.
mounts+=",$(ctrain carried)"
export PYTHONNOUSERSITE=1
container_options=(
    {pyxis.IMAGE}="$image"
    {pyxis.MOUNTS}="$mounts"
    {pyxis.WORKDIR}="$workdir"
    {pyxis.ENV}="{names}"
    {pyxis.NO_HOME}
)
"""


def check(mode: str) -> None:
    if mode == MPIRUN_MODE:
        raise JobRequestError(
            f"{MPIRUN_MODE} starts its ranks with mpirun, and pyxis' containers start only "
            "as srun steps",
            "use horovod-srun (srun --mpi=pmix) with --runtime pyxis",
        )


def _one(pattern: re.Pattern[str], text: str, replace: str) -> str:
    if len(pattern.findall(text)) != 1:
        raise CtrainError(
            f"a job template is damaged: not one part matching {pattern.pattern[:40]}...",
            "restore jobs/ from ctrain's source",
        )
    return pattern.sub(lambda m: m.expand(replace), text)


def render(text: str) -> str:
    """A script rendered for the other runtimes, in its pyxis form."""
    text = _one(_RUNTIME, text, RUNTIME_LINES.replace("\\", "\\\\"))
    text = _one(_EXEC_OPTIONS, text, GPU_LINE)
    step = block().replace("\\", "\\\\") + r'\1step=(srun \2"${container_options[@]}" '
    launcher = " ".join(carry.command(['"$@"'], IMAGE_PYTHON))
    return _one(_STEP, text, step + launcher + ")")
