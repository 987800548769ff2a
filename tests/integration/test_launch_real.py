"""ctrain launch and the training API for real: Slurm, OpenMPI, TensorFlow, Horovod.

One script (scripts/train_tiny.py) runs unchanged in all four modes.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import CTRAIN
from tests.support.real_runs import clean_env, reports, run, train

DEAD_PROXY = "http://127.0.0.1:9"  # nothing listens on the discard port
SRUN = ["srun", "-t", "5", "--kill-on-bad-exit=1"]


def same_weights(a: dict[str, object], b: dict[str, object]) -> bool:
    return a["weights"] == b["weights"]


@pytest.mark.modes
@pytest.mark.tensorflow
def test_plain_python_is_single(tmp_path: Path) -> None:
    run(train(tmp_path, epochs=2), clean_env())
    (report,) = reports(tmp_path, 1)
    assert report["mode"] == "single" and report["size"] == 1
    assert Path(str(report["checkpoint"])) == tmp_path / "ckpt"
    assert (tmp_path / "ckpt" / "weights.weights.h5").is_file()


@pytest.mark.modes
@pytest.mark.tensorflow
def test_mirrored_on_request(tmp_path: Path) -> None:
    run([CTRAIN, "launch", "--mode", "mirrored", "--", *train(tmp_path, epochs=2)], clean_env())
    (report,) = reports(tmp_path, 1)
    assert report["mode"] == "mirrored" and report["replicas"] == 1


def test_launch_replaces_itself_and_passes_the_exit_code(tmp_path: Path) -> None:
    probe = subprocess.Popen(
        [CTRAIN, "launch", "--quiet", "--", "sh", "-c", "echo $$; exit 7"],
        env=clean_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = probe.communicate(timeout=60)
    assert probe.returncode == 7
    assert int(out.strip()) == probe.pid


@pytest.mark.slurm
def test_explain_under_srun_gives_each_rank_its_place(tmp_path: Path) -> None:
    run(
        [
            *SRUN,
            "-n",
            "2",
            "--output",
            f"{tmp_path}/explain-%t.json",
            CTRAIN,
            "launch",
            "--explain",
            "--json",
        ],
        clean_env(),
        timeout=120,
    )
    plans = [json.loads((tmp_path / f"explain-{t}.json").read_text()) for t in (0, 1)]
    assert [p["rank"] for p in plans] == [0, 1]
    assert all(p["mode"] == "multiworker" and p["world_size"] == 2 for p in plans)
    assert plans[0]["ports"] == plans[1]["ports"] and len(set(plans[0]["ports"])) == 2
    assert plans[0]["tf_config"]["cluster"] == plans[1]["tf_config"]["cluster"]
    assert [p["tf_config"]["task"]["index"] for p in plans] == [0, 1]


@pytest.mark.modes
@pytest.mark.slurm
@pytest.mark.tensorflow
def test_multiworker_under_srun_despite_a_dead_proxy(tmp_path: Path) -> None:
    env = clean_env(
        http_proxy=DEAD_PROXY, https_proxy=DEAD_PROXY, grpc_proxy=DEAD_PROXY, HTTPS_PROXY=DEAD_PROXY
    )
    run([*SRUN, "-n", "2", CTRAIN, "launch", "--", *train(tmp_path)], env)
    chief, worker = reports(tmp_path, 2)
    assert chief["mode"] == worker["mode"] == "multiworker"
    assert chief["size"] == worker["size"] == 2
    assert chief["data_sum"] != worker["data_sum"]  # different data...
    assert same_weights(chief, worker)  # ...the same model
    workers = chief["tf_config"]["cluster"]["worker"]  # type: ignore[index]
    assert len(set(workers)) == 2
    assert all(k.lower().startswith("no_") for k in chief["proxies"])  # type: ignore[union-attr]
    # only the chief writes the checkpoint path; the other rank's scratch is gone at exit
    assert Path(str(chief["checkpoint"])) == tmp_path / "ckpt"
    assert not str(worker["checkpoint"]).startswith(str(tmp_path))
    assert not Path(str(worker["checkpoint"])).exists()


@pytest.mark.slurm
@pytest.mark.tensorflow
def test_two_jobs_on_one_node_do_not_collide(tmp_path: Path) -> None:
    outs = [tmp_path / "a", tmp_path / "b"]
    jobs = [
        subprocess.Popen(
            [*SRUN, "-n", "2", CTRAIN, "launch", "--", *train(out, epochs=2)],
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for out in outs
    ]
    for job in jobs:
        output, _ = job.communicate(timeout=400)
        assert job.returncode == 0, output
    ports = [set(reports(out, 2)[0]["tf_config"]["cluster"]["worker"]) for out in outs]  # type: ignore[index]
    assert not ports[0] & ports[1]
    for out in outs:
        assert same_weights(*reports(out, 2))


@pytest.mark.modes
@pytest.mark.slurm
@pytest.mark.horovod
def test_horovod_under_srun_pmix(tmp_path: Path) -> None:
    run(
        [
            *SRUN,
            "--mpi=pmix",
            "-n",
            "2",
            CTRAIN,
            "launch",
            "--mode",
            "horovod",
            "--",
            *train(tmp_path, epochs=3),
        ],
        clean_env(),
    )
    chief, worker = reports(tmp_path, 2)
    assert chief["mode"] == worker["mode"] == "horovod"
    assert chief["data_sum"] != worker["data_sum"]
    assert same_weights(chief, worker)
    assert chief["history"]["loss"] == worker["history"]["loss"]  # averaged over ranks
    lr = chief["history"]["lr"]  # type: ignore[index]
    assert lr[0] < lr[1] < lr[2] == pytest.approx(0.02)  # warm-up from 0.01 to 0.01 x 2 ranks
    assert Path(str(chief["checkpoint"])) == tmp_path / "ckpt"
    assert not (Path(str(worker["checkpoint"]))).exists()


@pytest.mark.modes
@pytest.mark.slurm
@pytest.mark.mpi
@pytest.mark.horovod
def test_mpirun_inside_a_batch_job_is_horovod_with_mpi_ranks(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    command = " ".join([CTRAIN, "launch", "--", *train(tmp_path, epochs=2)])
    script.write_text(
        f"#!/bin/bash\nset -e\nmpirun --allow-run-as-root -np 2 --bind-to none {command}\n"
    )
    run(
        ["sbatch", "--wait", "-n", "2", "-t", "5", "-o", str(tmp_path / "job.log"), str(script)],
        clean_env(),
    )
    chief, worker = reports(tmp_path, 2)
    assert chief["mode"] == worker["mode"] == "horovod"
    assert chief["slurm_procid"] == worker["slurm_procid"] == "0"  # Slurm's variable is wrong here
    assert same_weights(chief, worker)
