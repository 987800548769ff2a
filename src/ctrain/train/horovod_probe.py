"""``ctrain doctor``'s Horovod line, run in a child of the doctor's Python: ``python -m
ctrain.train.horovod_probe`` imports Horovod's TensorFlow ops and prints one JSON line, its
version and the controllers and GPU operations it was built with."""

from __future__ import annotations

import json
import sys


def main() -> int:
    import horovod
    import horovod.tensorflow as hvd

    built = {"mpi": bool(hvd.mpi_built()), "gloo": bool(hvd.gloo_built())}
    print(json.dumps({"version": horovod.__version__, **built, "nccl": int(hvd.nccl_built())}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
