"""The start-up hook ``ctrain launch`` gives Keras 3 multiworker scripts, run by a real Python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ctrain.launch.plan import KERAS3_HOOK
from ctrain.util.shipped import shipped_dir

PROBE = (
    "import sys\n"
    "from ctrain.train import keras3_mwms\n"
    "print(any(isinstance(f, keras3_mwms._AfterImport) for f in sys.meta_path))\n"
    "print(getattr(sys.modules.get('sitecustomize'), '__file__', None))\n"
)


def start_python(tmp_path: Path, *path: str) -> list[str]:
    src = str(Path(__file__).resolve().parents[3] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, src])}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_hook_arms_the_fix_and_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    hook = str(shipped_dir(KERAS3_HOOK))
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("print('site-specific start-up ran')\n")
    lines = start_python(tmp_path, hook, str(theirs))
    assert lines == ["site-specific start-up ran", "True", f"{hook}/sitecustomize.py"]


def test_without_the_hook_nothing_is_armed(tmp_path: Path) -> None:
    assert start_python(tmp_path)[0] == "False"
