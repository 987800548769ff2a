"""``ctrain bench --profile STEPS`` (pure): the largest worker count's run, and only it, is
started as ``ctrain launch --profile STEPS --profile-dir OUT/profile``. This module builds
those options, finds the run directory that run added (launch/profile.py's layout: RUN/
breakdown.txt, RUN/rank-R/plugins/profile/TIME/HOST.xplane.pb) and writes the report's section
naming its trace and its table of where the time went.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ctrain.profile_window import StepWindow
from ctrain.settings_table import BY_NAME

PROFILE_VARIABLE = BY_NAME["profile"].env  # ctrain launch's --profile: bench says which run traces
PROFILE_DIR = "profile"  # under the bench's output directory


@dataclass(frozen=True)
class ProfileRun:
    """Where the traced run's files are (launch/profile.py's run directory)."""

    workers: int
    steps: str  # the traced window, FIRST-LAST
    directory: str  # the run's directory; the profile directory when the run made none
    breakdown: str | None  # its breakdown.txt, None when none was written
    traces: tuple[str, ...] = ()  # TensorFlow's traces (*.xplane.pb) and Horovod's timeline
    table: str = ""  # breakdown.txt's text


def profile_flags(window: StepWindow, directory: str) -> list[str]:
    """``ctrain launch``'s options that trace ``window`` into ``directory``."""
    return ["--profile", str(window), "--profile-dir", directory]


def new_profile_run(before: Collection[str], after: Mapping[str, float]) -> str | None:
    """The run directory a run added to the profile directory: of ``after``'s names (name ->
    modification time) those not in ``before``, the newest; None when it added none."""
    added = [name for name in after if name not in before]
    return max(added, key=lambda name: (after[name], name)) if added else None


def markdown_profile(profile: ProfileRun, window: StepWindow, warmup: int) -> str:
    """Where the traced run's trace (of ``window``) and table of where the time went are."""
    timed = (
        "; its images/s include the traced steps"
        if window.last > warmup
        else "; all in the warm-up, so its images/s do not include them"
    )
    lines = [
        f"## Profile of the {profile.workers}-worker run",
        "",
        f"Steps {profile.steps} traced (`ctrain launch --profile {profile.steps}`){timed}.",
        "",
        f"- run directory: `{profile.directory}`",
    ]
    if profile.breakdown is None:
        lines.append(
            f"- no breakdown.txt was written: see the run's log, logs/w{profile.workers}.log"
        )
    else:
        lines.append(f"- where the time went: `{profile.breakdown}`")
    for trace in profile.traces:
        lines.append(f"- trace: `{trace}`")
    if any(trace.endswith(".xplane.pb") for trace in profile.traces):
        lines.append(f"- view: `tensorboard --logdir {profile.directory}/rank-0`, tab Profile")
    if profile.table:
        lines += ["", "```text", profile.table.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"
