"""`make bench`: what ctrain costs on top of plain TensorFlow, measured side by side in one run.

    .venv/bin/python benchmarks/run.py [--out runs/bench]
                                       [--only startup,launch,scaling,input,memory,scripts,
                                              apptainer,profile,faults,collectives]

Sections (docs/benchmarks.md shows the figures):
  startup  CLI start-up: `ctrain --version`, `--help`, `launch --explain` against
           `python -c "import click"` (benchmarks/startup.py)
  launch   time to the first training step: direct, `ctrain launch`, `srun ctrain launch`,
           `docker run` and `ctrain exec` on the docker runtime (when the image is there)
  scaling  2 workers against 1, one thread each, multiworker and horovod, through `ctrain bench`
           and launched by hand (plain srun), interleaved and repeated (benchmarks/scaling.py)
  input    the examples' real-data tf.data pipeline against synthetic tensors, same model
  memory   peak resident memory per worker against the same script run directly
  scripts  outside-style scripts (Horovod Keras, Keras 3 MultiWorkerMirroredStrategy) against
           the same through ctrain's API, 2 workers (benchmarks/scripts_vs_api.py)
  apptainer  `ctrain exec` against `apptainer exec` on the same SIF, with and without
           `--no-launch`, and where the difference goes (benchmarks/apptainer_exec.py)
  profile  `ctrain launch --profile` against none on a small tf-keras script: steps/s outside
           and inside the traced window (benchmarks/profile_overhead.py)
  faults   SIGTERM to every rank's end with the checkpoint and the steps lost, per mode; a
           rank's death to the step's end, per launcher; the stall watchdog's cost per step
           (benchmarks/faults.py)
  collectives  one step's gradient all-reduce alone, 2 ranks: MultiWorkerMirroredStrategy's
           ring over gRPC against Horovod's allreduce over MPI, wall and CPU time per call
           (benchmarks/collectives.py)

Writes OUT/report.md (also printed) and OUT/report.json; progress goes to stderr. Needs
`make install services`. Numbers are ratios taken in the same run, interleaved where it
matters, so a busy machine moves both sides; they are still noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from apptainer_exec import apptainer_exec, apptainer_table
from collectives import collectives, collectives_table
from common import REPO, T0, say
from faults import faults, faults_table
from overhead import launch_overhead, launch_table, memory, memory_table
from profile_overhead import profile_overhead, profile_table
from scaling import scaling, scaling_plot, scaling_table
from scripts_vs_api import scripts_table, scripts_vs_api
from startup import startup, startup_table
from throughput import input_pipeline, input_table

SECTIONS = (
    "startup", "launch", "scaling", "input", "memory", "scripts", "apptainer", "profile", "faults",
    "collectives",
)  # fmt: skip


def find_image(requested: str | None) -> str | None:
    """The CPU image with TensorFlow and ctrain (`make image-cpu`), if the Docker engine has it:
    --image, else $CTRAIN_BENCH_IMAGE, else ctrain:VERSION-cpu, local or in the local registry."""
    from ctrain import __version__

    wanted = requested or os.environ.get("CTRAIN_BENCH_IMAGE")
    tag = f"ctrain:{__version__}-cpu"
    for candidate in [wanted] if wanted else [tag, f"127.0.0.1:5000/{tag}"]:
        try:
            done = subprocess.run(
                ["docker", "image", "inspect", candidate], capture_output=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode == 0:
            return candidate
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "runs" / "bench"))
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--reps", type=int, default=3, help="launch and scripts repetitions")
    parser.add_argument("--startup-reps", type=int, default=15)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per scaling run")
    parser.add_argument("--scaling-reps", type=int, default=5, help="scaling repetitions")
    parser.add_argument("--image", help="docker image with TF and ctrain (default: the CPU one)")
    parser.add_argument("--sif", help="SIF with Python and ctrain for section apptainer")
    parser.add_argument("--profile-reps", type=int, default=5, help="profile repetitions")
    parser.add_argument("--faults-reps", type=int, default=5, help="faults repetitions")
    parser.add_argument("--collectives-reps", type=int, default=5, help="collectives repetitions")
    args = parser.parse_args(argv)
    only = [s for s in args.only.split(",") if s]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"  # logs and reports of the single runs; replaced on every run
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    image = find_image(args.image)
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    tables: list[tuple[str, str]] = []
    say(f"sections: {', '.join(only)}; work dir {work}")
    if "startup" in only:
        say("CLI start-up")
        results["startup"] = startup(args.startup_reps)
        tables.append(("CLI start-up", startup_table(results["startup"])))
    if "launch" in only:
        results["launch"] = launch_overhead(args.reps, image, work)
        tables.append(("Launch overhead", launch_table(results["launch"])))
    if "scaling" in only or "memory" in only:  # memory reads the ranks of ctrain's runs
        if "scaling" in only:
            results["scaling"] = scaling(out, args.steps, args.scaling_reps)
        else:
            results["scaling"] = scaling(out, args.steps, 1, only_ctrain=True)
        if "scaling" in only:
            tables.append(("Data-parallel efficiency", scaling_table(results["scaling"])))
            scaling_plot(results["scaling"], out / "scaling.png")
    if "input" in only:
        try:
            results["input"] = input_pipeline(work)
            tables.append(("Input pipeline", input_table(results["input"])))
        except (RuntimeError, OSError, KeyError) as exc:
            tables.append(("Input pipeline", f"failed: {exc}"))
    if "memory" in only:
        try:
            results["memory"] = memory(work, results["scaling"]["modes"], args.steps)
            tables.append(("Memory", memory_table(results["memory"])))
        except (RuntimeError, OSError, KeyError) as exc:
            tables.append(("Memory", f"failed: {exc}"))
    if "scripts" in only:
        results["scripts"] = scripts_vs_api(work, args.reps)
        tables.append(("Scripts against the API", scripts_table(results["scripts"])))
    if "apptainer" in only:
        say("apptainer exec")
        results["apptainer"] = apptainer_exec(args.startup_reps, work, args.sif)
        tables.append(("ctrain exec on Apptainer", apptainer_table(results["apptainer"])))
    if "profile" in only:
        results["profile"] = profile_overhead(work, args.profile_reps)
        tables.append(("Profiling overhead", profile_table(results["profile"])))
    if "faults" in only:
        results["faults"] = faults(work, args.faults_reps)
        tables.append(("Faults", faults_table(results["faults"])))
    if "collectives" in only:
        results["collectives"] = collectives(work, args.collectives_reps)
        tables.append(("Collectives", collectives_table(results["collectives"])))
    load_after = os.getloadavg()
    elapsed = time.monotonic() - T0
    head = (
        f"`make bench` on {platform.node()} ({os.cpu_count()} CPUs, "
        f"{platform.python_implementation()} {platform.python_version()}), "
        f"{time.strftime('%Y-%m-%d %H:%M %Z')}, {elapsed / 60:.1f} min; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after."
    )
    text = head + "\n\n" + "\n\n".join(f"### {title}\n\n{body}" for title, body in tables) + "\n"
    (out / "report.md").write_text(text)
    results.update(elapsed_s=elapsed, load_before=load_before, load_after=load_after, image=image)
    (out / "report.json").write_text(json.dumps(results, indent=2) + "\n")
    print(text)
    say(f"wrote {out / 'report.md'} and {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
