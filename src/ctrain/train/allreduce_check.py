"""The 2-rank allreduce every Horovod build of ctrain must pass (`make install` through
scripts/check-horovod-build.sh --allreduce, and the images' `install.sh verify`), once per
controller: ``mpirun -np 2 python -m ctrain.train.allreduce_check`` and ``horovodrun -np 2
--gloo python -m ctrain.train.allreduce_check``.

Each rank contributes its rank + 1; every rank must get the sum over all ranks, and the world
must be as large as the launcher made it. Prints one line per rank; exits 1 otherwise.
"""

from __future__ import annotations

import sys


def expected(size: int) -> float:
    """What a sum allreduce of rank + 1 over ``size`` ranks gives."""
    return float(size * (size + 1) // 2)


def main(argv: list[str] | None = None) -> int:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    want_size = int((sys.argv[1:] if argv is None else argv or ["2"])[0])
    hvd.init()
    controller = "mpi" if hvd.mpi_enabled() else "gloo" if hvd.gloo_enabled() else "none"
    value = tf.constant([float(hvd.rank() + 1)] * 4)
    got = hvd.allreduce(value, op=hvd.Sum).numpy().tolist()
    ok = hvd.size() == want_size and got == [expected(want_size)] * 4
    verdict = "ok" if ok else f"WRONG, want size {want_size}"
    line = f"allreduce_check: rank {hvd.rank()} of {hvd.size()} ({controller}, TensorFlow "
    line += f"{tf.__version__}): {got} {verdict}\n"
    # One write with its newline: ranks share the launcher's stdout, and print() writes the
    # newline apart when unbuffered (PYTHONUNBUFFERED), so another rank's line could land first.
    sys.stdout.write(line)
    sys.stdout.flush()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
