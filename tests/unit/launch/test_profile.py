"""``--profile``'s pure part: the window, the ranks that trace, the run's directory and the
environment a rank gets (launch/profile.py, and the plan that carries it)."""

from __future__ import annotations

import pytest

from ctrain.errors import ConfigError, LaunchError
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.keras import STARTUP_HOOK
from ctrain.launch.plan import LaunchOptions, make_plan
from ctrain.launch.profile import Process, profile_environment, profiled, run_name, traced_ranks
from ctrain.names import (
    ENV_LAUNCH_PROFILE,
    ENV_LAUNCH_PROFILE_RUN,
    ENV_LAUNCH_PROFILE_TRACE,
    Mode,
)
from ctrain.profile_window import MAX_STEPS, StepWindow, parse_window, window_of
from ctrain.settings import parse_flag, resolve
from ctrain.settings_table import Settings
from ctrain.util.shipped import shipped_dir
from tests.support.environs import slurm_step


@pytest.mark.parametrize(
    ("text", "window"),
    [
        ("20-25", StepWindow(20, 25)),
        ("2", StepWindow(2, 2)),
        (" 7 - 9 ", StepWindow(7, 9)),
        ("5-5", StepWindow(5, 5)),
        (f"2-{MAX_STEPS + 1}", StepWindow(2, MAX_STEPS + 1)),  # the longest window: 100 steps
    ],
)
def test_windows(text: str, window: StepWindow) -> None:
    assert parse_window(text) == window
    assert str(window) == f"{window.first}-{window.last}"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("0", "steps count from 1"),
        ("0-5", "steps count from 1"),
        ("1", "the first step"),
        ("1-10", "the first step"),
        ("25-20", "write it 20-25"),
        ("abc", "not a step"),
        ("20-", "not a step"),
        ("-5", "not a step"),
        ("2.5", "not a step"),
        ("", "not a step"),
        (f"2-{MAX_STEPS + 2}", f"more than {MAX_STEPS}"),
    ],
)
def test_bad_windows_say_why(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_window(text)


@pytest.mark.parametrize(
    ("flags", "env", "line"),
    [
        ({"profile": "1"}, {}, "--profile '1': the first step"),
        ({}, {"CTRAIN_PROFILE": "9-3"}, "CTRAIN_PROFILE='9-3': the range ends"),
        ({}, {"CTRAIN_PROFILE_RANKS": "first"}, "CTRAIN_PROFILE_RANKS='first': not auto"),
    ],
)
def test_settings_refuse_in_one_line(flags: dict[str, str], env: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as refused:
        if flags:
            ((name, text),) = flags.items()
            parse_flag(name, text)
        else:
            resolve({}, env, "/nonexistent")
    assert refused.value.line().startswith(f"ctrain: error: {line}")
    assert "Fix: " in refused.value.line()


@pytest.mark.parametrize(
    ("spec", "size", "mode", "ranks"),
    [
        ("auto", 1, Mode.SINGLE, {0}),
        ("auto", 2, Mode.HOROVOD, {0, 1}),
        ("auto", 256, Mode.HOROVOD, {0, 255}),
        ("auto", 4, Mode.MULTIWORKER, {0}),  # the chief only: see traced_ranks
        ("all", 3, Mode.HOROVOD, {0, 1, 2}),
        ("0,3", 4, Mode.HOROVOD, {0, 3}),
        ("2", 4, Mode.HOROVOD, {2}),
        ("0", 4, Mode.MULTIWORKER, {0}),
        ("all", 1, Mode.MULTIWORKER, {0}),
    ],
)
def test_traced_ranks(spec: str, size: int, mode: Mode, ranks: set[int]) -> None:
    assert traced_ranks(spec, size, mode) == ranks


@pytest.mark.parametrize(
    ("spec", "size", "mode", "said"),
    [
        ("0,7", 4, Mode.HOROVOD, "rank 7 of a run of 4"),
        ("all", 2, Mode.MULTIWORKER, "in multiworker mode"),
        ("1", 2, Mode.MULTIWORKER, "in multiworker mode"),
        ("0,9", 2, Mode.MULTIWORKER, "rank 9 of a run of 2"),
    ],
)
def test_ranks_that_cannot_trace_are_refused(spec: str, size: int, mode: Mode, said: str) -> None:
    with pytest.raises(LaunchError, match=said) as refused:
        traced_ranks(spec, size, mode)
    assert refused.value.fix


def test_a_window_too_long_says_how_long_and_what_to_give() -> None:
    with pytest.raises(ValueError) as refused:
        parse_window("2-102")
    assert str(refused.value) == (
        "101 steps, more than 100 to trace; a few steps show where the time goes, e.g. 2-7"
    )


MULTIWORKER_RANKS = (
    "--profile-ranks all in multiworker mode: TensorFlow's profiler can abort a worker other "
    "than the chief as it stops (docs/profiling.md)"
)


@pytest.mark.parametrize(
    ("spec", "size", "mode", "message", "fix"),
    [
        (
            "0,4",
            4,
            Mode.HOROVOD,
            "--profile-ranks 0,4: rank 4 of a run of 4",
            "name ranks below 4, or --profile-ranks auto",
        ),
        (
            "all",
            2,
            Mode.MULTIWORKER,
            MULTIWORKER_RANKS,
            "--profile-ranks auto (the chief) in multiworker mode; every rank times its steps",
        ),
    ],
)
def test_refused_ranks_in_full(spec: str, size: int, mode: Mode, message: str, fix: str) -> None:
    with pytest.raises(LaunchError) as refused:
        traced_ranks(spec, size, mode)
    assert (refused.value.message, refused.value.fix) == (message, fix)


@pytest.mark.parametrize(
    ("environ", "size", "name"),
    [
        ({"SLURM_JOB_ID": "77", "SLURM_STEP_ID": "3"}, 4, "job77.3"),
        ({"SLURM_JOB_ID": "77"}, 4, "job77"),
        ({"PMIX_NAMESPACE": "prterun-vm-1234@1"}, 2, "mpi-prterun-vm-1234_1"),
        ({"OMPI_MCA_ess_base_jobid": "2080571393"}, 2, "mpi-2080571393"),
        ({}, 1, "pid100"),
        ({}, 2, "ppid99"),  # ranks of one node share the launcher's process
        ({"PMIX_NAMESPACE": "prterun-GPU01-4242@1"}, 2, "mpi-prterun-GPU01-4242_1"),
    ],
)
def test_every_rank_of_a_run_names_it_alike(environ: dict[str, str], size: int, name: str) -> None:
    assert run_name(environ, size, 100, 99) == name


def env_of(
    window: StepWindow,
    ranks: str,
    directory: str,
    mode: Mode,
    rank: int,
    size: int,
    environ: dict[str, str],
    process: Process,
) -> dict[str, str]:
    decided = profiled(window, ranks, directory, mode, rank, size, environ, process)
    return profile_environment(decided, mode, environ)


def test_the_environment_of_a_rank() -> None:
    env = env_of(
        StepWindow(20, 25),
        "auto",
        "prof",
        Mode.HOROVOD,
        3,
        4,
        {"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0"},
        Process("/work", 1, 1),
    )
    assert env == {
        ENV_LAUNCH_PROFILE: "20-25",
        ENV_LAUNCH_PROFILE_RUN: "/work/prof/job5.0",
        ENV_LAUNCH_PROFILE_TRACE: "1",
        "HOROVOD_TIMELINE": "DYNAMIC",
    }
    middle = env_of(
        StepWindow(20, 25), "auto", "/abs", Mode.MULTIWORKER, 1, 4, {}, Process("/work", 1, 9)
    )
    assert middle[ENV_LAUNCH_PROFILE_TRACE] == "0"
    assert middle[ENV_LAUNCH_PROFILE_RUN] == "/abs/ppid9"
    assert "HOROVOD_TIMELINE" not in middle
    theirs = env_of(
        StepWindow(2, 3),
        "all",
        "p",
        Mode.HOROVOD,
        0,
        1,
        {"HOROVOD_TIMELINE": "/t.json"},
        Process("/w", 1, 1),
    )
    assert "HOROVOD_TIMELINE" not in theirs  # the user's own timeline runs; ctrain says so
    alone = env_of(StepWindow(2, 3), "auto", "p", Mode.SINGLE, 0, 1, {}, Process("/w", 4242, 1))
    assert alone[ENV_LAUNCH_PROFILE_RUN] == "/w/p/pid4242"  # a run of one: its own process


def plan_env(options: LaunchOptions, environ: dict[str, str]) -> dict[str, str]:
    """Rank 1 of a two-rank srun step on one node."""
    full = {**environ, **slurm_step(1, 2, job="8", step="1")}
    job = JobEnv.from_environ(full, "vm")
    return make_plan(job, options, full, (), False, process=Process("/w", 5, 4)).env_set


def test_the_plan_carries_the_profile_and_the_start_up_hook() -> None:
    hook = str(shipped_dir(STARTUP_HOOK))
    env = plan_env(
        LaunchOptions(mode="multiworker", keras="2", profile=parse_window("4-6")),
        {"PYTHONPATH": "/a"},
    )
    assert env[ENV_LAUNCH_PROFILE] == "4-6"
    assert env[ENV_LAUNCH_PROFILE_RUN] == "/w/ctrain-profile/job8.1"
    assert env[ENV_LAUNCH_PROFILE_TRACE] == "0"  # rank 1: in multiworker mode the chief only
    assert env["PYTHONPATH"] == f"{hook}:/a"
    plain = plan_env(LaunchOptions(mode="multiworker", keras="2"), {})
    assert ENV_LAUNCH_PROFILE not in plain
    assert plain["PYTHONPATH"] == hook  # multiworker's own reason: SIGTERM (train/stopping.py)


def test_the_plan_refuses_ranks_beyond_the_run() -> None:
    with pytest.raises(LaunchError, match="rank 5 of a run of 2"):
        plan_env(
            LaunchOptions(mode="multiworker", profile=parse_window("4-6"), profile_ranks="5"), {}
        )


@pytest.mark.parametrize("text", ["20-25", "2", " 7 - 9 "])
def test_a_profile_setting_is_parsed_once_and_its_window_kept(text: str) -> None:
    checked = parse_flag("profile", text)
    assert isinstance(checked, str)
    assert window_of(checked) == parse_window(text)
    assert LaunchOptions.from_settings(Settings(profile=checked)).profile == parse_window(text)
    assert window_of(None) is None
