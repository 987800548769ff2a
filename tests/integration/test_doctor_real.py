"""``ctrain doctor`` for real: the console script, the real tools, TensorFlow and Horovod probes."""

from __future__ import annotations

import json
import os
from importlib.metadata import version

import pytest

from ctrain import matrix
from tests.helpers import run_ctrain


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
        "tensorflow",
        "horovod",
        "mpi",
    ]
    for check in checks.values():
        assert check["status"] in ("PASS", "WARN", "FAIL")
        assert "check crashed" not in check["detail"], check

    tensorflow = checks["tensorflow"]
    assert tensorflow["status"] == "PASS", tensorflow
    row = matrix.find(matrix.load(), version("tensorflow"))  # `make install` holds the venv to it
    assert tensorflow["detail"].startswith(f"{row.tensorflow}, tf_keras {row.tf_keras}, ")

    horovod = checks["horovod"]
    assert horovod["status"] in ("PASS", "WARN"), horovod
    assert "MPI yes, Gloo yes" in horovod["detail"]

    failed = any(c["status"] == "FAIL" for c in checks.values())
    assert data["summary"]["failed"] is failed
    assert done.returncode == (1 if failed else 0), done.stderr
