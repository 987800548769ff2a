"""``ctrain job render|submit``: golden scripts, the templates themselves, refusals with fixes.

Regenerate the golden files after an intended change:
    CTRAIN_REGEN_GOLDEN=1 pytest tests/unit/slurm/test_jobs.py
then read the diff (git diff tests/unit/golden/jobs) before committing it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

import ctrain
from ctrain.cli import main
from ctrain.errors import JobRequestError
from ctrain.names import JOB_MODES
from ctrain.settings_table import BY_NAME
from ctrain.slurm import jobs
from ctrain.slurm.request import JobRequest, parse_time
from tests.support.helpers import REPO, need, sandbox
from tests.support.job_cases import CASES, WEIRD

TEMPLATES = REPO / "jobs"
GOLDEN = REPO / "tests" / "unit" / "golden" / "jobs"
REGEN = bool(os.environ.get("CTRAIN_REGEN_GOLDEN"))  # read before the fixture clears CTRAIN_*


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    rendered = jobs.render(CASES[name])
    path = GOLDEN / f"{name}.sbatch"
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered)
    assert rendered == path.read_text(), f"{name}: see the module docstring to regenerate"


@pytest.mark.parametrize("mode", JOB_MODES)
def test_templates_are_what_render_prints_by_default(mode: str) -> None:
    """The shipped scripts run as they are, and are the renderer's output for the defaults."""
    text = (TEMPLATES / f"{mode}.sbatch").read_text()
    assert jobs.render(JobRequest(mode, ("python", "train.py"))) == text


@pytest.mark.parametrize("mode", JOB_MODES)
def test_the_templates_default_image_is_the_image_settings_default(mode: str) -> None:
    """A template runs as it is (sbatch jobs/MODE.sbatch) and so names its image; it is the one
    ``ctrain exec`` and ``ctrain pull`` take by default (settings.py, the image's home)."""
    text = (TEMPLATES / f"{mode}.sbatch").read_text()
    assert f"\ndefault_image={BY_NAME['image'].default}\n" in text


@pytest.mark.parametrize("mode", JOB_MODES)
def test_every_sbatch_line_is_explained(mode: str) -> None:
    lines = (TEMPLATES / f"{mode}.sbatch").read_text().splitlines()
    sbatch = [i for i, line in enumerate(lines) if re.match(r"#{1,2}SBATCH ", line)]
    assert len(sbatch) >= 12
    for i in sbatch:
        above = lines[i - 1]
        assert above.startswith("# ") and "SBATCH" not in above, f"{mode}: {lines[i]} unexplained"


def test_the_signal_and_requeue_part_is_the_same_everywhere() -> None:
    tails = {
        mode: (TEMPLATES / f"{mode}.sbatch").read_text().split("# ---- common to every")[1]
        for mode in JOB_MODES
    }
    assert len(set(tails.values())) == 1
    tail = tails["single"]
    assert "requeue_exit=75" in tail and "scontrol requeue" in tail
    assert f"requeue_exit={jobs_exit_code()}" in tail


def jobs_exit_code() -> int:
    from ctrain.train.checkpoints import REQUEUE_EXIT_CODE

    return REQUEUE_EXIT_CODE


@pytest.mark.parametrize("mode", JOB_MODES)
def test_templates_ask_for_the_warning_signal_and_requeue(mode: str) -> None:
    options = jobs.sbatch_options((TEMPLATES / f"{mode}.sbatch").read_text())
    assert re.fullmatch(r"B:USR2@\d+", options["signal"])
    assert "requeue" in (TEMPLATES / f"{mode}.sbatch").read_text()
    assert options["open-mode"] == "append"


def test_modes_launch_their_way() -> None:
    text = {m: (TEMPLATES / f"{m}.sbatch").read_text() for m in JOB_MODES}
    assert "export CTRAIN_MODE=horovod" in text["horovod-srun"]
    assert "srun --mpi=pmix" in text["horovod-srun"]
    assert 'mpirun -np "$SLURM_NTASKS"' in text["horovod-mpirun"]
    assert "export CTRAIN_MODE=multiworker" in text["multiworker"]
    assert "export CTRAIN_MODE=mirrored" in text["mirrored"]
    for mode, script in text.items():
        resolved = script.index('image=$(ctrain resolve "$CTRAIN_IMAGE")')
        step = script.index('ctrain exec "${exec_options[@]}" "$image" -- "$@"')
        assert resolved < step, mode  # once, in the batch step, before the step


def _shell_files(tmp_path: Path) -> list[Path]:
    rendered = []
    for name, request in CASES.items():
        path = tmp_path / f"{name}.sbatch"
        path.write_text(jobs.render(request))
        rendered.append(path)
    return [*sorted(TEMPLATES.glob("*.sbatch")), *rendered]


def test_scripts_are_shellcheck_clean(tmp_path: Path) -> None:
    need(shutil.which("shellcheck") is not None, "shellcheck not installed (make system)")
    files = _shell_files(tmp_path)
    done = subprocess.run(
        ["shellcheck", *map(str, files)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout


def test_rendered_command_round_trips_through_bash(tmp_path: Path) -> None:
    script = jobs.render(CASES["multiworker-cpu"])
    body = script.split("# ---- what runs")[1].split("# ---- how it runs")[0]
    probe = tmp_path / "probe.sh"
    probe.write_text(f'set -euo pipefail\n{body}\nprintf "%s\\0" "$@"\n')
    done = subprocess.run(["bash", str(probe)], capture_output=True, timeout=30, env={})
    assert done.returncode == 0, done.stderr
    assert tuple(done.stdout.decode().split("\0")[:-1]) == WEIRD


def test_image_with_spaces_round_trips(tmp_path: Path) -> None:
    script = jobs.render(CASES["mirrored-8gpu"])
    body = script.split("# ---- what runs")[1].split("# ---- how it runs")[0]
    probe = tmp_path / "probe.sh"
    probe.write_text(f'set -euo pipefail\n{body}\nprintf "%s|%s" "$CTRAIN_IMAGE" "$CTRAIN_RUNTIME"')
    done = subprocess.run(["bash", str(probe)], capture_output=True, text=True, timeout=30, env={})
    assert done.stdout == "/scratch/me/images/ctrain 0.1.0.sif|apptainer"


# ---- refusals -------------------------------------------------------------------------------

REFUSED = [
    (JobRequest("mirrored", ("x",), nodes=2), "not on 2 nodes", "multiworker --nodes 2"),
    (JobRequest("single", ("x",), nodes=3), "not on 3 nodes", "multiworker"),
    (JobRequest("single", ("x",), gpus_per_node=0, nv=True), "asks for none", "--no-nv"),
    (JobRequest("multiworker", ("x",), gpus_per_node=0, nv=True), "asks for none", "--gpus"),
    (JobRequest("single", ("x",), gpus_per_node=2), "one GPU, not 2", "mirrored"),
    (JobRequest("multiworker", ("x",), gpus_per_node=4, tasks_per_node=2), "one task per GPU", ""),
    (JobRequest("mirrored", ("x",), tasks_per_node=4), "one task, not 4", "multiworker"),
    (JobRequest("single", ("x",), time="4h"), "not a Slurm time limit", "HH:MM:SS"),
    (JobRequest("single", ("x",), time="1:60:00"), "not a Slurm time limit", "D-HH:MM:SS"),
    (JobRequest("single", ("x",), time="5"), "before the job starts", "--signal-seconds"),
    (JobRequest("single", ("x",), time="0"), "no time at all", ""),
    (JobRequest("single", ("x",), signal_seconds=70000), "out of range", "65535"),
    (JobRequest("single", ("x",), mem="32 GB"), "not a Slurm memory size", "32G"),
    (JobRequest("single", ("x",), job_name="my job"), "sbatch would not read", "letters"),
    (JobRequest("single", ("x",), partition="gpu;rm"), "sbatch would not read", "commas"),
    (JobRequest("single", ("x",), account="a\nb"), "sbatch would not read", ""),
    (JobRequest("single", ()), "no training command", "--"),
    (JobRequest("single", ("x",), image="a\nb"), "newline", ""),
    (JobRequest("single", ("x",), runtime="lxc"), "--runtime", "host"),
    (JobRequest("horovod-mpirun", ("x",), runtime="pyxis"), "only as srun steps", "horovod-srun"),
    (JobRequest("gpu", ("x",)), "unknown job mode", "multiworker"),
]


@pytest.mark.parametrize(("request_", "message", "fix"), REFUSED)
def test_refusals_say_the_fix(request_: JobRequest, message: str, fix: str) -> None:
    with pytest.raises(JobRequestError) as info:
        jobs.render(request_)
    assert message in info.value.message
    assert fix in info.value.fix


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90 * 60),
        ("90:30", 90 * 60 + 30),
        ("04:00:00", 4 * 3600),
        ("1-0", 24 * 3600),
        ("2-12", (48 + 12) * 3600),
        ("1-02:03", (26 * 60 + 3) * 60),
        ("1-02:03:04", (26 * 60 + 3) * 60 + 4),
        ("100:00:00", 100 * 3600),
    ],
)
def test_parse_time(text: str, seconds: int) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4", "1-", "-1", "1-24", "1:61", "a", "1.5", "1 h"])
def test_parse_time_refuses(text: str) -> None:
    with pytest.raises(JobRequestError, match="not a Slurm time limit"):
        parse_time(text)


def test_cpu_only_multiworker_defaults_to_one_task_per_node() -> None:
    text = jobs.render(JobRequest("multiworker", ("x",), nodes=3, gpus_per_node=0))
    options = jobs.sbatch_options(text)
    assert options["ntasks-per-node"] == "1" and options["nodes"] == "3"
    assert "gpus-per-node" not in options and "##SBATCH --gpus-per-node" in text
    assert "exec_options=()" in text


def test_templates_dir_from_environment(tmp_path: Path) -> None:
    with pytest.raises(jobs.CtrainError, match="holds no job templates"):
        jobs.templates_dir({jobs.ENV_JOBS_DIR: str(tmp_path)})
    (tmp_path / "single.sbatch").write_text((TEMPLATES / "single.sbatch").read_text())
    assert jobs.templates_dir({jobs.ENV_JOBS_DIR: str(tmp_path)}) == tmp_path


def test_templates_are_the_packages_and_the_repository_links_to_them() -> None:
    found = jobs.templates_dir({})
    assert found == Path(ctrain.__file__).parent / "jobs"
    assert TEMPLATES.resolve() == found.resolve()
    assert sorted(p.stem for p in found.glob("*.sbatch")) == sorted(JOB_MODES)


def test_job_id_from_sbatch_parsable() -> None:
    assert jobs.job_id("1234\n") == "1234"
    assert jobs.job_id("1234;cluster\n") == "1234"
    with pytest.raises(jobs.CtrainError, match="no job id"):
        jobs.job_id("sbatch: error: nope\n")


# ---- CLI ------------------------------------------------------------------------------------


def test_render_cli_prints_the_script() -> None:
    args = ["job", "render", "multiworker", "--nodes", "1", "--gpus-per-node", "0"]
    args += ["--tasks-per-node", "2", "--mem", "2G", "--time", "10:00", "--cpus-per-task", "1"]
    args += ["--runtime", "host", "--signal-seconds", "30", "--", *WEIRD]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output == (GOLDEN / "multiworker-cpu.sbatch").read_text()


def test_render_cli_takes_the_image_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTRAIN_IMAGE", "/images/site.sif")
    result = CliRunner().invoke(main, ["job", "render", "single", "--", "python", "t.py"])
    assert "default_image=/images/site.sif\n" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["mirrored", "--nodes", "2"], "mirrored runs one process on one node"),
        (["single", "--gpus-per-node", "0", "--nv"], "--nv gives the container"),
        (["single", "--time", "4 hours"], "not a Slurm time limit"),
    ],
)
def test_render_cli_refusal_is_one_line(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(main, ["job", "render", *args, "--", "python", "t.py"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Fix:" in lines[0]


def fake_sbatch(root: Path, record: Path, reply: str = "4242") -> None:
    """An sbatch in ``root``/bin that records its argv and script and prints ``reply``."""
    sandbox(root).add_program(
        "sbatch",
        "#!/bin/bash\n"
        f'printf "%s\\n" "$@" > {record}.argv\n'
        f'cp "${{@: -1}}" {record}.script\n'
        f"echo '{reply}'\n",
    )


def test_submit_runs_sbatch_and_prints_the_job_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_sbatch(tmp_path, tmp_path / "sbatch")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    args = ["job", "submit", "single", "--gpus-per-node", "0", "--runtime", "host"]
    args += ["--save", str(tmp_path / "kept.sbatch"), "--", "python", "t.py"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output == "4242\n"
    argv = (tmp_path / "sbatch.argv").read_text().splitlines()
    assert argv[0] == "--parsable" and argv[1].endswith("single.sbatch")
    submitted = (tmp_path / "sbatch.script").read_text()
    assert submitted == (tmp_path / "kept.sbatch").read_text()
    assert "    set -- python t.py\n" in submitted and "default_runtime=host" in submitted


def test_submit_reports_sbatch_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = sandbox(tmp_path)
    box.add_program(
        "sbatch",
        "#!/bin/bash\necho 'sbatch: error: invalid partition specified: gpu' >&2\nexit 1\n",
    )
    bin_dir = box.bin
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = CliRunner().invoke(
        main, ["job", "submit", "single", "--partition", "gpu", "--", "python", "t.py"]
    )
    assert result.exit_code == 5
    assert "invalid partition specified" in result.output
