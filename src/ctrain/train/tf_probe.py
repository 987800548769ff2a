"""``ctrain doctor``'s TensorFlow line, run in a child of the doctor's Python (so nothing of
TensorFlow or CUDA loads into the doctor): ``python -m ctrain.train.tf_probe DIST...`` imports
TensorFlow and prints one JSON line, its version, the version of each DIST installed, and the
GPUs it sees."""

from __future__ import annotations

import importlib.metadata
import json
import sys


def installed(names: list[str]) -> dict[str, str]:
    """The version of each distribution of ``names`` that is installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def main(argv: list[str] | None = None) -> int:
    import tensorflow as tf

    dists = installed(sys.argv[1:] if argv is None else argv)
    gpus = [device.name for device in tf.config.list_physical_devices("GPU")]
    print(json.dumps({"version": tf.__version__, "dists": dists, "gpus": gpus}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
