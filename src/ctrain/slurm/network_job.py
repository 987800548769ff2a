"""The network check as a job script's first step (``ctrain job render --check-network``).

The rendered script's step line (``step=(... -- "$@")``, whatever starts it: srun, mpirun,
srun with pyxis' options) is copied with ``ctrain doctor --network`` in place of the training
command, so the check runs on every task through the same container exec line the training
uses, and a FAIL stops the job before training with the fix in its log.
"""

from __future__ import annotations

import re

from ctrain.errors import CtrainError

_STEP = re.compile(r'^step=\((?P<start>.*) -- "\$@"\)$', re.MULTILINE)
COMMON = "# ---- common to every ctrain job script"
CHECK = ("ctrain", "doctor", "--network")


def block(start: str) -> str:
    """The bash of the check, ``start`` being the step's words before ``--``."""
    return f"""\
# ---- the network check, before training (ctrain job render --check-network) ----------------
# The step above with `ctrain doctor --network` for the training command: on every task, in the
# image, the node's RDMA devices, what the container sees of them and (GPU nodes) NCCL's
# transport in a small allreduce. A FAIL line stops the job here, its fix in this log.
network_check=({start} -- {" ".join(CHECK)})
if ! "${{network_check[@]}}"; then
    echo "ctrain job: the network check failed (FAIL lines above): not training" >&2
    exit 1
fi
"""


def render(text: str) -> str:
    """A rendered job script with the network check before its training step."""
    steps = _STEP.findall(text)
    if len(steps) != 1 or text.count(COMMON) != 1:
        raise CtrainError(
            'a job template is damaged: not one step=(... -- "$@") line before its common part',
            "restore jobs/ from ctrain's source",
        )
    at = text.index(COMMON)
    return text[:at] + block(steps[0]) + text[at:]
