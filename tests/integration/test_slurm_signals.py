"""The warning signal sent by Slurm itself, through every job script that supports preemption.

Each script is rendered with a two-minute time limit and ``--signal=B:USR2@70``; no test sends
a signal. Every rank holds before a step of the first run (tests/scripts/
train_resumable.py ``--hold-at``) until the signal comes, so the run cannot end first. Slurm
checks time limits every 30 s (PERIODIC_TIMEOUT in slurmctld) and sends the warning at the
first check past ``limit - 70 s - 30 s``: 20 to 50 s into the run, 70 to 100 s before the
limit (with 10 s, a loaded machine once took longer than that to finish the step, write the
checkpoint and exit, and the job ended TIMEOUT). The job then checkpoints,
exits 75, is requeued, resumes and finishes (the resumed run gets RESUMED_LIMIT minutes, so
that it is not signalled again on a busy machine: that works too, but the number of runs would
be unknown); its weights are those of an uninterrupted run, and
only the chief ever wrote, renamed or removed anything in the shared checkpoint directory.

All jobs are submitted at once (the one-node partition runs what fits of them side by side).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctrain.errors import REQUEUE_EXIT_CODE
from tests.support.helpers import wait_for
from tests.support.slurm_jobs import (
    RESUMABLE,
    final_weights,
    job_record,
    lines,
    log,
    release_if_held,
    render,
    state,
    submit,
    uninterrupted_weights,
)

EPOCHS = 2
HOLD = "1:5"  # epoch 1, step 5 (0-based): the run stops in the middle of an epoch
MODES = {"single": 1, "mirrored": 1, "multiworker": 2, "horovod-srun": 2, "horovod-mpirun": 2}
RESUMED_LIMIT = "5"
ALL_JOBS_TIMEOUT = 900  # five jobs, two runs each, on 2 shared cores
pytestmark = [
    pytest.mark.slurm,
    pytest.mark.tensorflow,
    pytest.mark.horovod,
    pytest.mark.mpi,
    pytest.mark.timeout(1500),
]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, Path]]]:
    """Every preemptible job script submitted with Slurm's own warning signal, run to the end:
    mode -> (job id, working directory)."""
    submitted: dict[str, tuple[str, Path]] = {}
    try:
        for mode, ranks in MODES.items():
            workdir = tmp_path_factory.mktemp(mode)
            command = ["python", str(RESUMABLE), str(workdir / "out"), str(EPOCHS)]
            options = {"time": "2", "signal_seconds": "70", "job_name": f"signals-{mode}"}
            options |= {"tasks_per_node": str(ranks)} if ranks > 1 else {}
            script = render(mode, [*command, "--hold-at", HOLD], **options)
            assert "#SBATCH --signal=B:USR2@70\n" in script and "#SBATCH --time=2\n" in script
            ids: list[str] = []
            submit(script, workdir, ids)
            submitted[mode] = (ids[0], workdir)

        def all_done() -> bool:
            statuses = {job: state(job) for job, _ in submitted.values()}
            for job, status in statuses.items():
                if status.startswith("PENDING") and "BeginTime" in status:  # requeued
                    update = ["scontrol", "update", f"JobId={job}", f"TimeLimit={RESUMED_LIMIT}"]
                    subprocess.run(update, capture_output=True, timeout=30, check=True)
                release_if_held(job, status)
            return not any(statuses.values())

        wait_for(all_done, "every job to finish", timeout=ALL_JOBS_TIMEOUT, interval=1)
        yield submitted
    finally:
        for job, _ in submitted.values():
            subprocess.run(["scancel", job], capture_output=True, timeout=30)


@pytest.mark.parametrize("mode", list(MODES))
def test_slurm_warning_signal_checkpoints_requeues_and_resumes_exactly(
    mode: str,
    jobs: dict[str, tuple[str, Path]],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    job, workdir = jobs[mode]
    out, ranks, text = workdir / "out", MODES[mode], log(workdir, tail=0)
    record = job_record(job)
    assert record["JobState"] == "COMPLETED" and record["Restarts"] == "1", text[-4000:]
    assert text.count("SIGUSR2 received") == 1 and text.count("requeueing job") == 1, text
    runs = lines(out / "runs.jsonl")
    assert sorted((r["restart"], r["rank"], r["end"]) for r in runs) == [  # type: ignore[type-var]
        *((0, rank, f"exit {REQUEUE_EXIT_CODE}") for rank in range(ranks)),
        *((1, rank, "done") for rank in range(ranks)),
    ]
    # the second run started where the first stopped, every rank at the same step
    assert len({tuple(r["start"]) for r in runs if r["restart"] == 1}) == 1  # type: ignore[arg-type]
    assert [e["epoch"] for e in lines(out / "epochs.jsonl")] == list(range(EPOCHS))
    # both Horovod scripts run the same Horovod training
    reference = uninterrupted_weights(mode.split("-")[0], EPOCHS, tmp_path_factory)
    assert final_weights(out, ranks) == reference
    # the audit hook saw the chief write the shared directory, and no other rank ever
    writers = sorted(p.name for p in out.glob("ckpt-writes-rank*.jsonl"))
    assert writers == ["ckpt-writes-rank0.jsonl"]
    assert lines(out / writers[0])
