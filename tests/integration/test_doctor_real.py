"""``ctrain doctor`` for real: the console script, the real tools, TensorFlow and Horovod probes."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re

import pytest

from tests.support.helpers import run_ctrain


@pytest.mark.tensorflow
@pytest.mark.horovod
def test_doctor_json_on_this_machine() -> None:
    done = run_ctrain("doctor", "--json", env=os.environ, timeout=300)
    data = json.loads(done.stdout)
    checks = {c["name"]: c for c in data["checks"]}
    assert list(checks) == [
        "runtime",
        "podman",
        "cache",
        "tmp",
        "slurm",
        "gpus",
        "gpu-code",
        "cuda-libs",
        "tensorflow",
        "horovod",
        "mpi",
        "mpi-match",
    ]
    for check in checks.values():
        assert check["status"] in ("PASS", "WARN", "FAIL")
        assert "check crashed" not in check["detail"], check

    # No nvidia-smi here: no GPU to hold against TensorFlow's code.
    assert checks["gpu-code"] == {
        "name": "gpu-code",
        "status": "PASS",
        "detail": "no GPU: nothing to check",
        "fix": "",
    }

    # This venv has TensorFlow's CPU install: no CUDA library, and none needed.
    assert checks["cuda-libs"]["status"] == "PASS", checks["cuda-libs"]
    assert checks["cuda-libs"]["detail"] == (
        "none of TensorFlow's 12 CUDA 12 libraries opens here (a CPU install)"
    )

    tensorflow = checks["tensorflow"]
    assert tensorflow["status"] == "PASS", tensorflow
    tf, keras = (importlib.metadata.version(n) for n in ("tensorflow", "tf-keras"))
    assert tensorflow["detail"].startswith(f"{tf}, tf_keras {keras}, ")  # a row of the matrix

    horovod = checks["horovod"]
    assert horovod["status"] in ("PASS", "WARN"), horovod
    assert "MPI yes, Gloo yes" in horovod["detail"]

    match = checks["mpi-match"]  # outside any launch: this side's releases, nothing to compare
    assert match["status"] == "PASS", match
    assert re.match(r"Open MPI 4\.1\.\d+, PMIx 4\.2\.\d+ \(dpkg\); not checked", match["detail"])

    failed = any(c["status"] == "FAIL" for c in checks.values())
    assert data["summary"]["failed"] is failed
    assert done.returncode == (1 if failed else 0), done.stderr
