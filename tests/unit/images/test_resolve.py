"""Which image a container runs: the decision table (pure), the ranks count, and ``ctrain exec`` /
``ctrain resolve`` against the stand-in apptainer: pulled once through ctrain's pull, then run
from the local file with no network; several ranks of a step never pull."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest

from ctrain.images import resolve
from ctrain.names import RUNTIMES
from tests.support import fake_apptainer
from tests.support.helpers import run_ctrain

REF = "docker://registry.example/team/train:1"
TIMEOUT = 60
IMAGE_VERBS = ("pull", "inspect", "exec")


# -- the decision table ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "remote", "recorded", "ranks"),
    list(itertools.product(RUNTIMES, (False, True), (False, True), (1, 2, 8))),
)
def test_decision_table(runtime: str, remote: bool, recorded: bool, ranks: int) -> None:
    got = resolve.decide_image(runtime, remote, recorded, ranks)
    if runtime not in ("apptainer", "singularity", "charliecloud", "pyxis") or not remote:
        assert got == "as given"  # a local file; engines pull themselves; host runs no image
    elif recorded:
        assert got == "pulled"  # whatever the ranks: the file is there, no network
    else:
        assert got == ("pull" if ranks == 1 else "refuse")
    assert resolve.runs_from_cache(runtime, remote) == (got != "as given")  # its first row


STEP = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1"}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, 1),  # a login node
        ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}, 1),  # the batch step of a 4-task job
        ({**STEP, "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"}, 1),  # srun -n1
        ({**STEP, "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4"}, 4),
        ({"SLURM_JOB_ID": "7", "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, 2),
    ],
)
def test_ranks(environ: dict[str, str], expected: int) -> None:
    assert resolve.ranks(environ) == expected


# -- against the stand-in ----------------------------------------------------------------------

IN_STEP = {
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_ID": "0",
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_STEP_NUM_TASKS": "2",
}


class Env:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.log = tmp / "calls.jsonl"
        self.cache = tmp / "cache"
        self.target = self.cache / "images" / "docker_registry.example_team_train_1.sif"
        self.box = fake_apptainer.with_standin(
            tmp,
            USER="tester",
            CTRAIN_CACHE_DIR=str(self.cache),
            CTRAIN_MIN_FREE_GB="1",
            CTRAIN_RUNTIME="apptainer",
        )

    def ctrain(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = self.box.with_env(**extra)
        return run_ctrain(*args, env=env, cwd=self.tmp, timeout=TIMEOUT)

    def verbs(self) -> list[str]:
        """The calls that touch an image, in order (not --version probes, not events)."""
        found = [c["argv"][0] for c in fake_apptainer.calls(self.log) if "argv" in c]  # type: ignore[index]
        return [str(verb) for verb in found if verb in IMAGE_VERBS]

    def images(self) -> list[object]:
        return [c["container"]["image"] for c in fake_apptainer.calls(self.log) if "container" in c]  # type: ignore[index]

    def reset(self) -> None:
        self.log.unlink(missing_ok=True)


@pytest.fixture
def fake(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_exec_outside_a_job_pulls_once_then_runs_the_local_file(fake: Env) -> None:
    done = fake.ctrain("exec", "--no-launch", REF, "--", "true")
    assert done.returncode == 0, done.stderr
    assert fake.verbs() == ["pull", "inspect", "exec"]
    assert len(fake_apptainer.downloads(fake.log)) == 1
    assert fake.images() == [str(fake.target)]
    record = json.loads(fake.target.with_name(fake.target.name + ".json").read_text())
    assert record["ref"] == REF
    fake.reset()
    done = fake.ctrain("exec", "--no-launch", REF, "--", "true", FAKE_APPTAINER_OFFLINE="1")
    assert done.returncode == 0, done.stderr
    assert fake.verbs() == ["exec"]  # no pull, no registry: the record says it is there
    assert fake.images() == [str(fake.target)]


def test_a_rank_of_a_step_runs_the_pulled_file_offline(fake: Env) -> None:
    assert fake.ctrain("pull", REF).returncode == 0  # on a login node, say
    fake.reset()
    done = fake.ctrain(
        "exec", "--no-launch", REF, "--", "true", FAKE_APPTAINER_OFFLINE="1", **IN_STEP
    )
    assert done.returncode == 0, done.stderr
    assert fake.verbs() == ["exec"]
    assert fake.images() == [str(fake.target)]


def test_a_rank_of_a_step_refuses_an_image_not_pulled(fake: Env) -> None:
    done = fake.ctrain("exec", "--no-launch", REF, "--", "true", **IN_STEP)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctrain: error: ")
    assert f"ctrain pull {REF}" in lines[0] and "job scripts" in lines[0]
    assert fake.verbs() == [] and not fake.target.exists()


def test_dry_run_names_the_pull_and_runs_nothing(fake: Env) -> None:
    done = fake.ctrain("exec", "--dry-run", "--no-launch", REF, "--", "true")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split()[-2:] == [REF, "true"]
    pulled = f"  pulled first: ctrain pull {REF}, then {fake.target} is run in its place"
    assert pulled in done.stdout.splitlines()
    assert fake.verbs() == [] and not fake.cache.exists()


def test_resolve_prints_the_local_file_and_reuses_it(fake: Env) -> None:
    first = fake.ctrain("resolve", REF)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"{fake.target}\n"
    fake.reset()
    again = fake.ctrain("resolve", REF, FAKE_APPTAINER_OFFLINE="1")
    assert again.stdout == f"{fake.target}\n" and fake.verbs() == []


def test_resolve_offline_and_not_pulled_says_to_pull_on_a_login_node(fake: Env) -> None:
    """A batch step on a compute node without the network: one line, the fix names the pull."""
    done = fake.ctrain("resolve", REF, FAKE_APPTAINER_OFFLINE="1")
    assert done.returncode != 0 and done.stdout == ""
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("ctrain: error:")]
    assert "no route to host" in line and f"login node, ctrain pull {REF}," in line
    assert not fake.target.exists()


@pytest.mark.parametrize(
    ("runtime", "image"),
    [("host", REF), ("docker", REF), ("docker", "ctrain:1-cpu"), ("apptainer", "IMG")],
)
def test_resolve_prints_other_images_as_given(fake: Env, runtime: str, image: str) -> None:
    fake.box.add_program("docker", "#!/bin/sh\nexit 99\n")  # found, never run
    if image == "IMG":
        image = str(fake.tmp / "where.sif")
        Path(image).write_bytes(b"")
    done = fake.ctrain("resolve", image, CTRAIN_RUNTIME=runtime)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{image}\n" and fake.verbs() == []


@pytest.mark.parametrize(
    ("runtime", "image"),
    [
        ("apptainer", "./missing.sif"),
        ("apptainer", "missing"),  # apptainer runs only files and directories
        ("singularity", "/no/such/dir/train.sif"),
        ("docker", "./missing.sif"),
        ("charliecloud", "../images/missing"),
        ("pyxis", "missing.sqsh"),
    ],
)
def test_a_local_image_that_is_not_there_is_refused_where_it_is_named(
    fake: Env, runtime: str, image: str
) -> None:
    for program in ("docker", "ch-run", "srun", "singularity"):
        fake.box.add_program(program, "#!/bin/sh\nexit 99\n")  # found, never run
    for verb in ("resolve", "exec"):
        args = [verb, image] if verb == "resolve" else [verb, image, "--", "true"]
        done = fake.ctrain(*args, CTRAIN_RUNTIME=runtime)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr == (
            f"ctrain: error: image {image!r} does not exist Fix: check the path, or pull it "
            "there first: ctrain pull -o PATH REF\n"
        )
    assert fake.verbs() == []
