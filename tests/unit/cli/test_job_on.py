"""``ctrain job ... --on``: the options given are the options the cluster's ctrain gets, and
which cluster (if any) a command goes to follows the setting's precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctrain.cli import _remote
from ctrain.cli.jobs import _options


def test_the_given_options_go_on_as_given_and_the_others_stay_unset() -> None:
    flags = {
        "nodes": 2, "gpus_per_node": 0, "tasks_per_node": None, "cpus_per_task": 4,
        "mem": "8G", "time": "1:00:00", "partition": None, "account": "proj",
        "job_name": "a b", "image": "x.sif", "runtime": "apptainer", "nv": False,
        "signal_seconds": None, "check_network": "true", "profile": "5-6",
    }  # fmt: skip
    assert _options(flags) == [
        "--nodes", "2", "--gpus-per-node", "0", "--cpus-per-task", "4", "--mem", "8G",
        "--time", "1:00:00", "--account", "proj", "--job-name", "a b", "--image", "x.sif",
        "--runtime", "apptainer", "--no-nv", "--check-network", "--profile", "5-6",
    ]  # fmt: skip
    assert _options({"nv": True, "check_network": None}) == ["--nv"]


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("CTRAIN_REMOTE", raising=False)
    return tmp_path


def test_where_a_command_goes(here: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _remote.chosen(None) is None
    (here / "ctrain.toml").write_text('remote = "hpc"\n')
    assert _remote.chosen(None) == "hpc"
    monkeypatch.setenv("CTRAIN_REMOTE", "other")
    assert _remote.chosen(None) == "other"
    assert _remote.chosen("flag") == "flag"
    monkeypatch.setenv("CTRAIN_REMOTE", "")  # how the cluster's ctrain is run: here, always
    assert _remote.chosen(None) is None
