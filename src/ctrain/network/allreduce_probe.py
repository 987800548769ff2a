"""The network check's one all-reduce across every rank of the step, run as a child of ``ctrain
doctor --network`` (network/check.py): ``python -m ctrain.network.allreduce_probe``. Horovod's
under ctrain's horovod mode, else TensorFlow's with NCCL chosen explicitly
(MultiWorkerMirroredStrategy from TF_CONFIG), else MirroredStrategy's in one process. Prints one
JSON line: the ranks or replicas, and the sum of the first element (each contributes 1)."""

from __future__ import annotations

import json
import os
import sys

from ctrain.names import ENV_LAUNCH_MODE, Mode

SIZE = 1024  # floats per all-reduce


def horovod_sum() -> dict[str, float]:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    with tf.device("/GPU:0" if gpus else "/CPU:0"):
        total = hvd.allreduce(tf.ones([SIZE]), op=hvd.Sum)
    return {"ranks": hvd.size(), "sum": float(total[0])}


def tensorflow_sum() -> dict[str, float]:
    import tensorflow as tf

    dist = tf.distribute
    if json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster"):
        nccl = dist.experimental.CommunicationImplementation.NCCL
        options = dist.experimental.CommunicationOptions(implementation=nccl)
        strategy = dist.MultiWorkerMirroredStrategy(communication_options=options)
    else:
        strategy = dist.MirroredStrategy()

    @tf.function  # type: ignore[untyped-decorator]
    def step() -> object:
        def one() -> object:
            return dist.get_replica_context().all_reduce(dist.ReduceOp.SUM, tf.ones([SIZE]))

        return strategy.run(one)

    first = strategy.experimental_local_results(step())[0]
    return {"replicas": strategy.num_replicas_in_sync, "sum": float(first[0])}


def main() -> int:
    horovod = os.environ.get(ENV_LAUNCH_MODE) == Mode.HOROVOD.value
    print(json.dumps(horovod_sum() if horovod else tensorflow_sum()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
