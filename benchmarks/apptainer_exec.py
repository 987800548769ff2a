"""`ctrain exec` on Apptainer against `apptainer exec` on the same SIF, and where the difference
goes: `python -c pass` (the interpreter), `python -c "import click"` (the floor of any Click
program), `ctrain --version` (that and ctrain's root command), `ctrain exec --dry-run` (ctrain's
whole part: its imports and the plan, no container) and `apptainer --version` (the probe ctrain
makes once per apptainer file, then reads from its cache). On the full image, the launcher
carried into the container (container/carry.py: binds, a shell that asks the interpreter its
version, then `ctrain launch` from the host's copy) against the image's own `ctrain launch`.

    .venv/bin/python benchmarks/apptainer_exec.py [--reps 15] [--sif IMAGE.sif]
                                                  (in `make bench`: section apptainer)

The `true` rows run a SIF of busybox alone, built here from Debian's /bin/busybox (a few
seconds). The rows on the full image (`true` and `python3 -c pass` in it) need a SIF with Python
and ctrain: --sif, else the CPU image's SIF from `make sif FLAVOUR=cpu` when it is there; without
one they are left out. The
runs are interleaved, one of each per round after one warm-up round (it also fills ctrain's
version cache), so a busy machine slows all of them alike. For each: the median, quartiles,
min and max in milliseconds; the ratios are of medians. What ctrain adds to a rank's start is
measured in pairs: in each round the two commands ran one after the other, and the table gives
the median (and quartiles) of the rounds' differences. Goals: `ctrain exec --no-launch` adds at
most 70 ms to `apptainer exec`, and the carried launcher (`ctrain exec FULL -- python3 -c pass`)
at most 200 ms to `apptainer exec FULL python3 -c pass`. The carried copy runs whether the image
has ctrain or not (it shadows the image's), so FULL stands for an image without ctrain of the
same Python.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import CTRAIN, PYTHON, REPO, clean_env, median, run, say, spread_ms

from ctrain import __version__

GOAL = 1.25
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static (make system)
APPLETS = ("sh", "true")
APPTAINER_TRUE = "apptainer exec IMG true"
CTRAIN_TRUE = "ctrain exec --no-launch IMG -- true"
APPTAINER_FULL_TRUE = "apptainer exec FULL true"
CTRAIN_FULL_TRUE = "ctrain exec --no-launch FULL -- true"
APPTAINER_PY = "apptainer exec FULL python3 -c pass"
CTRAIN_PY = "ctrain exec FULL -- python3 -c pass (the carried ctrain launch inside)"
IMAGE_PY = "ctrain exec --no-launch FULL -- ctrain launch -- python3 -c pass (the image's own)"
# (ctrain's, apptainer's, the most ctrain may add in ms): measured in pairs, round by round
ADDED = ((CTRAIN_FULL_TRUE, APPTAINER_FULL_TRUE, 70.0), (CTRAIN_PY, APPTAINER_PY, 200.0))
RATIOS = (
    (CTRAIN_TRUE, APPTAINER_TRUE),
    (CTRAIN_FULL_TRUE, APPTAINER_FULL_TRUE),
    (CTRAIN_PY, APPTAINER_PY),
    (CTRAIN_PY, IMAGE_PY),
)


def busybox_sif(apptainer: str, work: Path) -> Path:
    """A SIF of busybox alone: /bin/busybox and its applets ``sh`` and ``true``."""
    image = work / "busybox.sif"
    with tempfile.TemporaryDirectory(dir=work) as tree:
        bin_dir = Path(tree) / "bin"
        bin_dir.mkdir()
        shutil.copy2(BUSYBOX, bin_dir / "busybox")
        for applet in APPLETS:
            (bin_dir / applet).symlink_to("busybox")
        run([apptainer, "build", "--force", str(image), tree], clean_env(), timeout=300)
    return image


def python_sif(requested: str | None) -> Path | None:
    """--sif, else the CPU image's SIF of `make sif FLAVOUR=cpu`, when it is there."""
    if requested:
        return Path(requested).resolve()
    found = REPO / "build" / f"ctrain-{__version__}-cpu.sif"
    return found if found.is_file() else None


def commands(apptainer: str, tiny: Path, full: Path | None) -> dict[str, list[str]]:
    exec_ = [CTRAIN, "exec", "--runtime", "apptainer"]
    found = {
        "python -c pass": [PYTHON, "-c", "pass"],
        'python -c "import click"': [PYTHON, "-c", "import click"],
        "ctrain --version": [CTRAIN, "--version"],
        "apptainer --version": [apptainer, "--version"],
        "ctrain exec --dry-run --no-launch IMG -- true": [
            *exec_,
            "--dry-run",
            "--no-launch",
            str(tiny),
            "--",
            "true",
        ],  # fmt: skip
        APPTAINER_TRUE: [apptainer, "exec", str(tiny), "true"],
        CTRAIN_TRUE: [*exec_, "--no-launch", str(tiny), "--", "true"],
    }
    if full is not None:
        found[APPTAINER_FULL_TRUE] = [apptainer, "exec", str(full), "true"]
        found[CTRAIN_FULL_TRUE] = [*exec_, "--no-launch", str(full), "--", "true"]
        found[APPTAINER_PY] = [apptainer, "exec", str(full), "python3", "-c", "pass"]
        found[CTRAIN_PY] = [*exec_, str(full), "--", "python3", "-c", "pass"]
        found[IMAGE_PY] = [*exec_, "--no-launch", str(full), "--", "ctrain", "launch", "--"]
        found[IMAGE_PY] += ["python3", "-c", "pass"]
    return found


def differences(times: dict[str, list[float]], ours: str, theirs: str) -> list[float]:
    """Round by round, ``ours`` minus ``theirs`` (run one after the other in each round)."""
    return [a - b for a, b in zip(times[ours], times[theirs], strict=True)]


def apptainer_exec(reps: int, work: Path, sif: str | None = None) -> dict[str, Any]:
    apptainer = shutil.which("apptainer")
    if apptainer is None:
        return {"note": "apptainer not found (make system)", "rows": [], "reps": reps}
    tiny = busybox_sif(apptainer, work)
    full = python_sif(sif)
    argvs = commands(apptainer, tiny, full)
    env = clean_env(threads=None)
    times: dict[str, list[float]] = {name: [] for name in argvs}
    for round_ in range(reps + 1):  # round 0: warm-up, not counted
        for name, argv in argvs.items():
            start = time.perf_counter()
            run(argv, env, timeout=300)
            if round_:
                times[name].append((time.perf_counter() - start) * 1000)
    rows = [{"command": name, **spread_ms(t)} for name, t in times.items()]
    ratios = [
        {"command": ours, "against": theirs, "ratio": median(times[ours]) / median(times[theirs])}
        for ours, theirs in RATIOS
        if ours in times
    ]
    added = [
        {
            "command": ours,
            "against": theirs,
            "goal_ms": goal,
            **spread_ms(differences(times, ours, theirs)),
        }
        for ours, theirs, goal in ADDED
        if ours in times
    ]
    note = None
    if full is None:
        note = "no SIF with Python and ctrain (make sif FLAVOUR=cpu, or --sif): no FULL rows"
    return {
        "reps": reps,
        "goal": GOAL,
        "rows": rows,
        "ratios": ratios,
        "added": added,
        "image": str(full) if full else None,
        "note": note,
    }


def apptainer_table(section: dict[str, Any]) -> str:
    if not section["rows"]:
        return f"not measured: {section['note']}"
    lines = [
        f"`ctrain exec` on Apptainer against `apptainer exec` on the same SIF, "
        f"{section['reps']} interleaved runs of each (goal: at most {section['goal']}x with "
        "`--no-launch`); IMG is busybox alone for `true`"
        + (f", FULL is `{section['image']}`" if section["image"] else "")
        + ":",
        "",
        "| command | median | quartiles | min - max |",
        "|:--|--:|--:|--:|",
    ]
    for r in section["rows"]:
        lines.append(
            f"| `{r['command']}` | {r['median_ms']:.0f} ms | {r['q1_ms']:.0f} - {r['q3_ms']:.0f} ms"
            f" | {r['min_ms']:.0f} - {r['max_ms']:.0f} ms |"
        )
    lines += ["", "| ratio of medians | |", "|:--|--:|"]
    for r in section["ratios"]:
        lines.append(f"| `{r['command']}` / `{r['against']}` | {r['ratio']:.2f}x |")
    if section.get("added"):
        lines += [
            "",
            "| what ctrain adds, in pairs | median | quartiles | goal |",
            "|:--|--:|--:|--:|",
        ]
        for r in section["added"]:
            met = "met" if r["median_ms"] <= r["goal_ms"] else "not met"
            lines.append(
                f"| `{r['command']}` - `{r['against']}` | +{r['median_ms']:.0f} ms "
                f"| {r['q1_ms']:+.0f} - {r['q3_ms']:+.0f} ms | +{r['goal_ms']:.0f} ms ({met}) |"
            )
    if section["note"]:
        lines += ["", section["note"] + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=15, help="rounds (at least 15 for the docs)")
    parser.add_argument("--sif", help="a SIF with Python and ctrain for the python3 rows")
    args = parser.parse_args(argv)
    say(f"apptainer exec, {args.reps} rounds")
    with tempfile.TemporaryDirectory(prefix="ctrain-bench-") as work:
        print(apptainer_table(apptainer_exec(args.reps, Path(work), args.sif)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
