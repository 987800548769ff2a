"""Running a script in scripts/fresh-state.sh's sandbox, for the tests of the sandbox itself
(test_fresh_state.py) and of scripts/cold-ci.sh (test_cold_ci.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.helpers import REPO


def in_fresh_state(
    script: str, timeout: float, checkout: Path = REPO, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run bash SCRIPT in ``checkout``, in a new sandbox of that checkout's fresh-state.sh; kill
    the whole sandbox on a timeout."""
    proc = subprocess.Popen(
        [str(checkout / "scripts" / "fresh-state.sh"), "bash", "-euo", "pipefail", "-c", script],
        cwd=checkout,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"timed out after {timeout} s:\n{out}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, None)
