"""Faults: how fast and how cleanly a training ends when the cluster stops it (issue 45).

Every run trains the tiny model of benchmarks/scripts/resumable_steps.py through ctrain's API
(`ctx.resume`, `ctx.callbacks`, `ctx.preemption_callbacks`; one thread per rank, a checkpoint
every epoch) on the local Slurm's `debug` partition. The faults come at random steps: rank 0's
count of steps done, drawn from STEPS with a seeded generator (SEED) and recorded.

  sigterm   `scancel --signal=TERM` of the step (what Slurm sends every task when it cancels,
            requeues or preempts a job) in single (`srun -n 1 ctrain launch`), multiworker
            (`srun -n 2`) and Horovod (`srun --mpi=pmix -n 2`) mode: seconds from the signal to
            the step's end (srun returns when every rank has ended), each rank's exit code (75:
            it stopped with the checkpoint written), and the steps lost per fault: the steps a
            rank did past the newest checkpoint (its last logged step against the checkpoint's),
            which a resumed run must do again
  death     SIGKILL to rank 1 of a 2-rank Horovod training, under `srun --kill-on-bad-exit=1`,
            plain `srun` (the survivor must notice by itself) and `mpirun` (Open MPI, its own
            hosts on this machine): seconds from the kill to the step's end, and its exit code
  watchdog  one process, the same training with CTRAIN_STALL_TIMEOUT=0 (the stall watchdog off)
            and with the default, interleaved (the order turned every other repetition): the
            median step of the epochs after the first, of wall clock and of CPU time, and with
            over without

The kinds of fault run in turn within each repetition, so load on the machine moves them alike.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from common import CTRAIN, PYTHON, REPO, clean_env, run, say
from scaling import spread

SCRIPT = REPO / "benchmarks" / "scripts" / "resumable_steps.py"
SEED = 45
STEPS = (20, 80)  # the fault comes once rank 0 has done this many steps: past the first epoch
EPOCHS = 30  # far past any fault (16 or 32 steps an epoch); ends the run should none come
MODES = {"single": 1, "multiworker": 2, "horovod": 2}  # ranks
LAUNCHERS = ("srun --kill-on-bad-exit=1", "srun", "mpirun")
VARIANTS = ("off", "default")  # CTRAIN_STALL_TIMEOUT=0, and unset (1800 s)
WATCHDOG_ROWS = 24000  # 1500 steps an epoch: the first of 3 epochs warms up, 3000 are timed
START_TIMEOUT = 180  # from the launch to the fault's step, on 2 busy cores
END_TIMEOUT = 120  # from the fault to the step's end: the stop budget (25 s) and KillWait (30 s)
BUDGET_SPENT = "(CTRAIN_STOP_BUDGET) and no checkpoint was agreed: ending now"
MPIRUN = ["mpirun", "--allow-run-as-root", "-np", "2", "--bind-to", "none"]


def training(out: Path, *extra: str) -> list[str]:
    return [PYTHON, str(SCRIPT), str(out), str(EPOCHS), "--log-steps", *extra]


def srun(ranks: int, name: str, *options: str) -> list[str]:
    return ["srun", "-p", "debug", "-n", str(ranks), "-t", "5", "-J", name, *options]


def sigterm_argv(mode: str, name: str, out: Path) -> list[str]:
    """One step of ``mode`` under srun, as the job scripts start it."""
    mpi = ["--mpi=pmix"] if mode == "horovod" else []
    launcher = srun(MODES[mode], name, "--kill-on-bad-exit=1", *mpi)
    return [*launcher, CTRAIN, "launch", "--mode", mode, "--", *training(out)]


def death_argv(launcher: str, name: str, out: Path) -> list[str]:
    """A 2-rank Horovod step under ``launcher`` (one of LAUNCHERS)."""
    options = launcher.split()[1:]  # srun's
    first = MPIRUN if launcher == "mpirun" else srun(2, name, "--mpi=pmix", *options)
    return [*first, CTRAIN, "launch", "--mode", "horovod", "--", *training(out)]


def watchdog_argv(out: Path) -> list[str]:
    extra = ["--rows", str(WATCHDOG_ROWS), "--checkpoint-every", "3"]
    return [CTRAIN, "launch", "--", PYTHON, str(SCRIPT), str(out), "3", *extra]


def steps_logged(out: Path, rank: int) -> list[tuple[int, int]]:
    """(epoch, step) of every step the rank ended, in order."""
    path = out / f"steps-rank{rank}.log"
    if not path.exists():
        return []
    pairs = (line.split() for line in path.read_text().splitlines() if line.count(" ") == 1)
    return [(int(epoch), int(step)) for epoch, step in pairs]


def newest_checkpoint(out: Path) -> tuple[int, int]:
    """(epoch, steps done in it) of the newest checkpoint: ``ckpt-e<EPOCH>-s<STEP>``."""
    names = sorted(p.name for p in (out / "ckpt").glob("ckpt-e*-s*"))
    if not names:
        raise RuntimeError(f"no checkpoint in {out / 'ckpt'}")
    _, epoch, step = names[-1].split("-")
    return int(epoch[1:]), int(step[1:])


def steps_lost(last: tuple[int, int], checkpoint: tuple[int, int], per_epoch: int) -> int:
    """The steps done after ``checkpoint``: ``last`` is the last step ended (0-based)."""
    done = last[0] * per_epoch + last[1] + 1
    return done - (checkpoint[0] * per_epoch + checkpoint[1])


def read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def tool(argv: Sequence[str]) -> str:
    """A Slurm command's output (squeue, scancel)."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout


def wait_for(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    """Poll every 10 ms until ``ready``; an error if the run ends first or takes too long."""
    deadline = time.monotonic() + START_TIMEOUT
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError(f"the run ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {START_TIMEOUT} s")
        time.sleep(0.01)


def started(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        return subprocess.Popen(argv, env=env, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)


def ended(proc: subprocess.Popen[bytes]) -> int:
    """The run's exit code, once it ends after the fault."""
    try:
        return proc.wait(timeout=END_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the run did not end within {END_TIMEOUT} s of the fault") from None


def stop(proc: subprocess.Popen[bytes], name: str) -> None:
    """End a run an error left running: its Slurm job (named ``name``, ours) cancelled; srun or
    mpirun terminated (mpirun ends its ranks), killed if it lingers."""
    subprocess.run(["scancel", "-n", name], capture_output=True, timeout=30)
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def reached(out: Path, target: int) -> Callable[[], bool]:
    return lambda: len(steps_logged(out, 0)) >= target


def sigterm_once(mode: str, target: int, here: Path) -> dict[str, Any]:
    """One step of ``mode``, SIGTERM once rank 0 has done ``target`` steps."""
    out, name = here / "out", f"bench-faults-{os.getpid()}-{here.name}"
    proc = started(sigterm_argv(mode, name, out), clean_env(), here / "run.log")
    try:
        wait_for((out / "start-rank0.json").exists, proc, "the training's start")
        job = tool(["squeue", "-h", "-n", name, "-o", "%i"]).strip()  # asked before the step
        wait_for(reached(out, target), proc, f"step {target}")
        at = len(steps_logged(out, 0))
        began = time.monotonic()
        tool(["scancel", "--signal=TERM", job])
        code = ended(proc)
        seconds = time.monotonic() - began
    finally:
        if proc.poll() is None:
            stop(proc, name)
    per_epoch = read_json(out / "start-rank0.json")["steps_per_epoch"]
    checkpoint = newest_checkpoint(out)
    ranks = range(MODES[mode])
    ends = [read_json(out / f"end-rank{rank}.json") for rank in ranks]
    return {
        "target": target,
        "signalled_at": at,
        "seconds": seconds,
        "exit": code,
        "rank_exits": [end["code"] if end else None for end in ends],
        "checkpoint": list(checkpoint),
        "lost": [steps_lost(steps_logged(out, r)[-1], checkpoint, per_epoch) for r in ranks],
    }


def death_once(launcher: str, target: int, here: Path) -> dict[str, Any]:
    """A 2-rank Horovod step; SIGKILL to rank 1 once rank 0 has done ``target`` steps."""
    out, name = here / "out", f"bench-faults-{os.getpid()}-{here.name}"
    env = clean_env(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = started(death_argv(launcher, name, out), env, here / "run.log")
    try:
        wait_for(reached(out, target), proc, f"step {target}")
        pid = read_json(out / "start-rank1.json")["pid"]
        at = len(steps_logged(out, 0))
        began = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        code = ended(proc)
        seconds = time.monotonic() - began
    finally:
        if proc.poll() is None:
            stop(proc, name)
    log = (here / "run.log").read_text(errors="replace")
    return {
        "target": target,
        "killed_at": at,
        "seconds": seconds,
        "exit": code,
        "budget_spent": BUDGET_SPENT in log,
    }


def watchdog_once(variant: str, here: Path) -> dict[str, float]:
    """The median step after the first epoch, milliseconds of wall clock and CPU time."""
    out = here / "out"
    env = clean_env()
    if variant == "off":
        env["CTRAIN_STALL_TIMEOUT"] = "0"
    run(watchdog_argv(out), env, timeout=START_TIMEOUT, log=here / "run.log")
    timing = read_json(out / "timing-rank0.json")
    return {"wall_ms": timing["wall_ms"], "cpu_ms": timing["cpu_ms"]}


def attempt(found: dict[str, Any], key: str, measure: Callable[[], Any]) -> None:
    """Append one measurement to ``found["runs"][key]``; a failure stops that key's runs."""
    if key in found["failed"]:
        return
    try:
        found["runs"][key].append(measure())
    except (RuntimeError, OSError, LookupError, TypeError, ValueError,
            subprocess.SubprocessError) as exc:  # fmt: skip
        found["failed"][key] = str(exc)


def faults(work: Path, reps: int = 5) -> dict[str, Any]:
    """``reps`` repetitions of every fault, interleaved."""
    rng = random.Random(SEED)
    targets = {key: [rng.randrange(*STEPS) for _ in range(reps)] for key in (*MODES, *LAUNCHERS)}
    sections: dict[str, dict[str, Any]] = {
        kind: {"runs": {key: [] for key in keys}, "failed": {}}
        for kind, keys in (("sigterm", MODES), ("death", LAUNCHERS), ("watchdog", VARIANTS))
    }
    base = work / "faults"
    for rep in range(reps):
        for mode in MODES:
            say(f"faults {rep + 1}/{reps}: SIGTERM, {mode}")
            here = base / f"sigterm-{mode}-{rep}"
            target = targets[mode][rep]
            attempt(sections["sigterm"], mode, partial(sigterm_once, mode, target, here))
        for number, launcher in enumerate(LAUNCHERS):
            say(f"faults {rep + 1}/{reps}: a rank killed, {launcher}")
            here = base / f"death-{number}-{rep}"
            target = targets[launcher][rep]
            attempt(sections["death"], launcher, partial(death_once, launcher, target, here))
        for variant in VARIANTS[:: -1 if rep % 2 else 1]:
            say(f"faults {rep + 1}/{reps}: the watchdog {variant}")
            here = base / f"watchdog-{variant}-{rep}"
            attempt(sections["watchdog"], variant, partial(watchdog_once, variant, here))
    return {**sections, "reps": reps, "seed": SEED, "steps": list(STEPS)}


def failed_row(cells: int, head: str, why: str) -> str:
    return f"| {head} | failed: {why[-200:]} |" + " |" * (cells - 2)


def sigterm_table(section: dict[str, Any]) -> list[str]:
    lines = [
        "| mode | SIGTERM to every rank's end, s | every rank exited 75 | steps lost per "
        "fault | signal sent at step | n |",
        "|:--|--:|--:|--:|:--|--:|",
    ]
    for mode, runs in section["runs"].items():
        head = f"{mode} ({MODES[mode]} rank{'s' if MODES[mode] > 1 else ''})"
        if mode in section["failed"]:
            lines.append(failed_row(6, head, section["failed"][mode]))
            continue
        clean = sum(all(code == 75 for code in r["rank_exits"]) for r in runs)
        lost = [max(r["lost"]) for r in runs]
        steps = ", ".join(str(r["signalled_at"]) for r in runs)
        lines.append(
            f"| {head} | {spread([r['seconds'] for r in runs], 1)} | {clean} of {len(runs)} | "
            f"{spread(lost, 0)} | {steps} | {len(runs)} |"
        )
    return lines


def death_table(section: dict[str, Any]) -> list[str]:
    lines = [
        "| launcher | kill to the step's end, s | step's exit code | "
        "survivor ended by its stop budget | killed at step | n |",
        "|:--|--:|:--|--:|:--|--:|",
    ]
    for launcher, runs in section["runs"].items():
        head = f"`{launcher}`"
        if launcher in section["failed"]:
            lines.append(failed_row(6, head, section["failed"][launcher]))
            continue
        codes = ", ".join(sorted({str(r["exit"]) for r in runs}))
        spent = sum(r["budget_spent"] for r in runs)
        steps = ", ".join(str(r["killed_at"]) for r in runs)
        lines.append(
            f"| {head} | {spread([r['seconds'] for r in runs], 1)} | {codes} | "
            f"{spent} of {len(runs)} | {steps} | {len(runs)} |"
        )
    return lines


def ratios(runs: dict[str, list[dict[str, float]]], key: str) -> list[float]:
    """The watchdog on over off, per repetition."""
    return [on[key] / off[key] for off, on in zip(runs["off"], runs["default"], strict=False)]


def watchdog_table(section: dict[str, Any]) -> list[str]:
    if section["failed"]:
        return [f"failed: {json.dumps(section['failed'])[-300:]}"]
    runs = section["runs"]
    lines = [
        "| per step | watchdog off (`CTRAIN_STALL_TIMEOUT=0`) | default (on, 1800 s) "
        "| on / off | n |",
        "|:--|--:|--:|--:|--:|",
    ]
    for key, name in (("wall_ms", "wall clock, ms"), ("cpu_ms", "CPU time, ms")):
        sides = [spread([r[key] for r in runs[v]], 3) for v in VARIANTS]
        lines.append(
            f"| {name} | {' | '.join(sides)} | {spread(ratios(runs, key), 3)} "
            f"| {len(runs['off'])} |"
        )
    return lines


def faults_table(section: dict[str, Any]) -> str:
    low, high = section["steps"]
    lines = [
        "Faults on the tiny model of benchmarks/scripts/resumable_steps.py (one thread per "
        f"rank, a checkpoint every epoch), {section['reps']} repetitions, each fault at a random "
        f"step from {low} to {high - 1} (seed {section['seed']}), median (min - max):",
        "",
        "SIGTERM (`scancel --signal=TERM` of the step, under `srun`; steps lost: the steps a rank "
        "did past the checkpoint, the most of any rank):",
        "",
        *sigterm_table(section["sigterm"]),
        "",
        "A rank's death (SIGKILL to rank 1 of a 2-rank Horovod training, both ranks on this host; "
        "srun with `--mpi=pmix`):",
        "",
        *death_table(section["death"]),
        "",
        "The stall watchdog's cost (one process; the median of 3000 steps of the tiny model, "
        "about a millisecond each: the worst case, where a step's own work is least):",
        "",
        *watchdog_table(section["watchdog"]),
    ]
    return "\n".join(lines)
