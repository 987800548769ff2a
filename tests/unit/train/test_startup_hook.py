"""The start-up hook ``ctrain launch`` gives scripts that never call ctrain, run by a real
Python: what it arms, from the launch's variables, and the sitecustomize it shadows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ctrain.launch.keras import STARTUP_HOOK
from ctrain.names import Launched, Mode, Profiled
from ctrain.util.shipped import shipped_dir

PROBE = (
    "import sys\n"
    "from ctrain.train import after_import, keras3_mwms, steps, stopping\n"
    "print(after_import.waiting_for(keras3_mwms.TRAINER))\n"
    "print(after_import.waiting_for(steps.FUNCTION))\n"
    "print(getattr(sys.modules.get('sitecustomize'), '__file__', None))\n"
    "print(after_import.waiting_for(stopping.STRATEGY_MODULE))\n"
)
# what ctrain launch hands a rank (names.Launched, names.Profiled)
MULTIWORKER_KERAS3 = {
    **Launched(
        mode=Mode.MULTIWORKER,
        rank=0,
        size=2,
        local_rank=0,
        local_size=1,
        collective="auto",
        collective_timeout=600,
    ).to_env(),
    "TF_USE_LEGACY_KERAS": "0",
}
PROFILE = Profiled("3-4", "/nonexistent/run", True).to_env()
LAUNCH = ("CTRAIN_LAUNCH_", "TF_USE_LEGACY_KERAS", "PYTHONPATH")


def start_python(tmp_path: Path, env: dict[str, str], *path: str) -> list[str]:
    src = str(Path(__file__).resolve().parents[3] / "src")
    mine = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCH)}
    mine.update(env, PYTHONPATH=os.pathsep.join([*path, src]))
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=mine,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_hook_arms_the_fix_and_runs_the_sitecustomize_it_shadows(tmp_path: Path) -> None:
    hook = str(shipped_dir(STARTUP_HOOK))
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("print('site-specific start-up ran')\n")
    lines = start_python(tmp_path, MULTIWORKER_KERAS3, hook, str(theirs))
    assert lines == [
        "site-specific start-up ran",
        "True",
        "False",
        f"{hook}/sitecustomize.py",
        "True",
    ]


def test_the_hook_arms_the_step_hooks_for_profile(tmp_path: Path) -> None:
    hook = str(shipped_dir(STARTUP_HOOK))
    assert start_python(tmp_path, PROFILE, hook)[:2] == ["False", "True"]
    both = {**MULTIWORKER_KERAS3, **PROFILE}
    assert start_python(tmp_path, both, hook)[:2] == ["True", "True"]
    tf_keras = {**MULTIWORKER_KERAS3, "TF_USE_LEGACY_KERAS": "1"}
    assert start_python(tmp_path, tf_keras, hook)[:2] == ["False", "False"]


def test_without_the_hook_nothing_is_armed(tmp_path: Path) -> None:
    assert start_python(tmp_path, {**MULTIWORKER_KERAS3, **PROFILE})[:2] == ["False", "False"]


def test_the_hook_gives_sigterm_back_after_each_multiworker_strategy(tmp_path: Path) -> None:
    """TensorFlow's MultiWorkerMirroredStrategy installs a SIGTERM handler that only records
    the signal (its real effect: tests/integration/test_preemption_real.py)."""
    hook = str(shipped_dir(STARTUP_HOOK))
    tf_keras = {**MULTIWORKER_KERAS3, "TF_USE_LEGACY_KERAS": "1"}
    assert start_python(tmp_path, tf_keras, hook)[-1] == "True"
    horovod = {
        **tf_keras,
        **Launched(
            mode=Mode.HOROVOD,
            rank=0,
            size=2,
            local_rank=0,
            local_size=1,
            collective="auto",
            collective_timeout=600,
        ).to_env(),
    }
    assert start_python(tmp_path, horovod, hook)[-1] == "False"
