"""One rank of the `collectives` section (benchmarks/collectives.py): the all-reduce of a
training step's gradients, timed alone, with nothing else running.

The tensors have the shapes of MobileNetV2's trainable variables (64x64 images, 1000 classes: the
scaling section's model), all-reduced in one call as a step all-reduces them: through the
replica context of ctrain's MultiWorkerMirroredStrategy in multiworker mode (what the Keras
optimizer does; with --own, of a strategy made with TensorFlow's defaults, as a script that
builds its own does under `ctrain launch`), as one grouped allreduce in Horovod mode (what
Horovod's fusion makes of a step's allreduces). Then the same for one float: the latency of a
collective with no data. Rank R writes DIR/rank<R>.json: the bytes, the wall milliseconds of
each call, and the CPU milliseconds this process spent per call, all its threads together.

    srun -n 2 ctrain launch --mode multiworker -- python allreduce_timed.py --report DIR [--own]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ctrain.distributed


def timed(call: Callable[[], Any], calls: int, warmup: int) -> tuple[list[float], float]:
    """Wall milliseconds of each of ``calls`` calls after ``warmup``, and the process's CPU
    milliseconds per call over them."""
    for _ in range(warmup):
        call()
    walls = []
    cpu = time.process_time()
    for _ in range(calls):
        start = time.perf_counter()
        call()
        walls.append((time.perf_counter() - start) * 1000)
    return walls, (time.process_time() - cpu) * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--report", required=True, help="each rank writes DIR/rank<R>.json")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--own", action="store_true", help="MultiWorkerMirroredStrategy()")
    args = parser.parse_args()
    if args.own:  # the TF_CONFIG ctrain launch set, and nothing else of ctrain's
        import tensorflow as tf

        strategy, horovod = tf.distribute.MultiWorkerMirroredStrategy(), False
        mode, rank = "multiworker, own", json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    else:
        ctx = ctrain.distributed.init()
        import tensorflow as tf

        strategy, horovod, mode, rank = ctx.strategy, ctx.hvd is not None, ctx.mode.value, ctx.rank

    model = tf.keras.applications.MobileNetV2(weights=None, input_shape=(64, 64, 3), classes=1000)
    gradients = [tf.ones(v.shape) for v in model.trainable_variables]
    one = [tf.ones([1])]
    if horovod:
        import horovod.tensorflow as hvd

        def reducer(tensors: list[Any]) -> Callable[[], Any]:
            group = tf.function(lambda *given: hvd.grouped_allreduce(list(given), op=hvd.Sum))
            return lambda: group(*tensors)  # arguments: Horovod names its op by the tensors'

    else:

        def reducer(tensors: list[Any]) -> Callable[[], Any]:
            def replica() -> Any:
                context = tf.distribute.get_replica_context()
                return context.all_reduce(tf.distribute.ReduceOp.SUM, tensors)

            return tf.function(lambda: strategy.run(replica))

    walls, cpu = timed(reducer(gradients), args.calls, args.warmup)
    tiny, tiny_cpu = timed(reducer(one), args.calls, args.warmup)
    report = {
        "mode": mode,
        "rank": rank,
        "tensors": len(gradients),
        "bytes": sum(int(g.shape.num_elements()) * 4 for g in gradients),
        "wall_ms": walls,
        "cpu_ms_per_call": cpu,
        "tiny_wall_ms": tiny,
        "tiny_cpu_ms_per_call": tiny_cpu,
    }
    path = Path(args.report, f"rank{rank}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(report) + "\n")
    os.replace(temporary, path)


if __name__ == "__main__":
    main()
