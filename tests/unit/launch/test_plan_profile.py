"""The plan's options from the settings, its ``--profile`` variables, and the port of Horovod's
Gloo rendezvous (launch/plan.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.launch.jobenv import JobEnv
from ctrain.launch.plan import LaunchOptions, make_plan
from ctrain.launch.ports import PORT_BLOCK, port_block
from ctrain.launch.profile import Process
from ctrain.names import (
    ENV_LAUNCH_PROFILE,
    ENV_LAUNCH_PROFILE_RUN,
    ENV_LAUNCH_PROFILE_TRACE,
    Mode,
)
from ctrain.profile_window import parse_window
from ctrain.settings import resolve
from tests.support.environs import hydra_under_srun

PROFILE_KEYS = (ENV_LAUNCH_PROFILE, ENV_LAUNCH_PROFILE_RUN, ENV_LAUNCH_PROFILE_TRACE)


def test_options_from_settings_carry_every_setting(tmp_path: Path) -> None:
    environ = {
        "HOME": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "CTRAIN_MODE": "horovod",
        "CTRAIN_COLLECTIVE": "ring",
        "CTRAIN_COLLECTIVE_TIMEOUT": "90",
        "CTRAIN_PORT_BASE": "30000",
        "CTRAIN_KEEP_PROXIES": "1",
        "CTRAIN_KERAS": "3",
        "CTRAIN_TUNE": "off",
        "CTRAIN_SKIP_MPI_CHECK": "1",
        "CTRAIN_PROFILE": "20-25",
        "CTRAIN_PROFILE_DIR": "traces",
        "CTRAIN_PROFILE_RANKS": "0,3",
    }
    settings = resolve({}, environ, tmp_path)
    assert LaunchOptions.from_settings(settings) == LaunchOptions(
        mode="horovod",
        collective="ring",
        collective_timeout=90,
        port_base=30000,
        port_base_chosen=True,
        keep_proxies=True,
        keras="3",
        tune="off",
        skip_mpi_check=True,
        profile=parse_window("20-25"),
        profile_dir="traces",
        profile_ranks="0,3",
    )


@pytest.mark.parametrize(
    ("job_id", "step_id", "port"),
    [("91", "2", 25055), ("91", "0", 24927), ("4242", "3", 29727), ("12", "5", 25759)],
)
def test_gloo_rendezvous_listens_on_the_last_port_of_the_steps_block(
    job_id: str, step_id: str, port: int
) -> None:
    """Rank ports start at the step's block's first port; the rendezvous takes its last one."""
    assert port == 20000 + (port_block(job_id, step_id) + 1) * PORT_BLOCK - 1
    env = {**hydra_under_srun(3), "SLURM_JOB_ID": job_id, "SLURM_STEP_ID": step_id}
    plan = make_plan(JobEnv.from_environ(env, "cn02"), LaunchOptions(), env, ())
    assert plan.rendezvous is not None and plan.rendezvous.explain() == {
        "addr": "cn01",
        "port": port,
        "hosts": ["cn01", "cn02"],
    }
    assert plan.env_set["HOROVOD_GLOO_RENDEZVOUS_PORT"] == str(port)
    assert plan.tf_config is None and "TF_CONFIG" not in plan.env_set  # Horovod's, not TF's


@pytest.mark.parametrize(
    ("options", "process", "expected"),
    [
        # make_plan without the launching process: a relative run directory, ids 0
        (
            LaunchOptions(profile=parse_window("20-25")),
            None,
            ("20-25", "ctrain-profile/ppid0", "1"),
        ),
        (
            LaunchOptions(profile=parse_window("3")),
            Process("/w", 11, 10),
            ("3-3", "/w/ctrain-profile/ppid10", "1"),
        ),
        (
            LaunchOptions(profile=parse_window("5-6"), profile_dir="/scratch/p", profile_ranks="1"),
            Process("/w", 11, 10),
            ("5-6", "/scratch/p/ppid10", "0"),
        ),
    ],
)
def test_profile_environment_of_rank_0_of_2(
    options: LaunchOptions, process: Process | None, expected: tuple[str, str, str]
) -> None:
    env = {"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}
    plan = make_plan(JobEnv.from_environ(env, "h"), options, env, (), process=process)
    assert tuple(plan.env_set[key] for key in PROFILE_KEYS) == expected


@pytest.mark.parametrize(
    ("process", "run"),
    [(None, "ctrain-profile/pid0"), (Process("/w", 11, 10), "/w/ctrain-profile/pid11")],
)
def test_profile_run_of_one_process_is_named_for_it(process: Process | None, run: str) -> None:
    options = LaunchOptions(profile=parse_window("20-25"))
    plan = make_plan(JobEnv.from_environ({}, "h"), options, {}, (), process=process)
    assert tuple(plan.env_set[key] for key in PROFILE_KEYS) == ("20-25", run, "1")


HOROVOD_OF_2 = {"PMI_RANK": "0", "PMI_SIZE": "2", "MPI_LOCALRANKID": "0", "MPI_LOCALNRANKS": "2"}


# (the rank's environment, --profile) -> the HOROVOD_TIMELINE ctrain sets (None: none)
TIMELINES = [
    (HOROVOD_OF_2, "20-25", "DYNAMIC"),  # started and stopped at the window's edges
    ({**HOROVOD_OF_2, "HOROVOD_TIMELINE": "/w/t.json"}, "20-25", None),  # the user's kept
    (HOROVOD_OF_2, None, None),  # no --profile
    ({}, "20-25", None),  # not Horovod
]


@pytest.mark.parametrize(("env", "profile", "timeline"), TIMELINES)
def test_profile_starts_horovods_dynamic_timeline(
    env: dict[str, str], profile: str | None, timeline: str | None
) -> None:
    options = LaunchOptions(profile=profile)
    plan = make_plan(JobEnv.from_environ(env, "h"), options, env, ())
    assert plan.mode is (Mode.HOROVOD if env else Mode.SINGLE)
    assert plan.env_set.get("HOROVOD_TIMELINE") == timeline
