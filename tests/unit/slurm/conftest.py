"""Every job-script test renders with no CTRAIN_* setting, no user configuration and a ledger
of jobs of its own; ``fakes`` gives a test the fake programs the scripts run
(tests/support/fake_job_programs.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.fake_job_programs import add_fakes


@pytest.fixture(autouse=True)
def _no_ctrain_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in list(os.environ):
        if key.startswith("CTRAIN_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    """``tmp_path`` as a sandbox with fake srun, mpirun, scontrol and ctrain on its PATH."""
    return add_fakes(tmp_path)
