"""Fake srun, mpirun, scontrol and ctrain for the job scripts run by bash, in a sandbox's bin
dir: each records its argv under FAKE_DIR (the sandbox's root); srun and mpirun then exit or
wait for USR2 as FAKE_MODE says (a SIGTERM ends them, as it would a real step); scontrol says
the job's state, its preemption and its partition's PreemptMode as the FAKE_* variables say."""

from __future__ import annotations

from pathlib import Path

from tests.support.helpers import sandbox

FAKE_STEP = """#!/bin/bash
# A stand-in for srun/mpirun: records its argv, then exits as FAKE_MODE says.
printf '%s\\n' "$(basename "$0")" "$@" > "$FAKE_DIR/argv"
case "$FAKE_MODE" in
    exit:*) exit "${FAKE_MODE#exit:}" ;;
    trap)
        got=0
        trap 'got=$((got + 1)); echo "$got" > "$FAKE_DIR/usr2"' USR2
        touch "$FAKE_DIR/started"
        while [ "$got" -lt "${FAKE_SIGNALS:-1}" ]; do sleep 0.05; done
        exit "${FAKE_EXIT:-75}"
        ;;
esac
"""
FAKE_SCONTROL = """#!/bin/bash
# `scontrol -o show job ID` prints the job with JobState=$FAKE_JOB_STATE (nothing when unset;
# FAKE_JOB_STATE_LATER from the second call on), Requeue=$FAKE_REQUEUE (1 when unset) and
# PreemptTime=$FAKE_PREEMPT_TIME (None when unset), and exits with $FAKE_SHOW_EXIT.
# `scontrol show config` says PreemptType $FAKE_PREEMPT_TYPE (preempt/partition_prio when
# unset); `scontrol -o show partition P` says PreemptMode=$FAKE_PREEMPT_MODE (OFF when unset).
# Any other command is added to $FAKE_DIR/scontrol, one word per line.
if [ "$1 $2 $3" = "-o show job" ]; then
    state=${FAKE_JOB_STATE:-}
    if [ -e "$FAKE_DIR/shown" ] && [ -n "${FAKE_JOB_STATE_LATER:-}" ]; then
        state=$FAKE_JOB_STATE_LATER
    fi
    touch "$FAKE_DIR/shown"
    [ -n "$state" ] && echo "JobId=$4 JobName=x JobState=$state Reason=None" \\
        "Requeue=${FAKE_REQUEUE:-1} EndTime=2026-01-01T00:01:00" \\
        "PreemptTime=${FAKE_PREEMPT_TIME:-None}"
    exit "${FAKE_SHOW_EXIT:-0}"
fi
if [ "$1 $2" = "show config" ]; then
    echo "PreemptMode             = REQUEUE"
    echo "PreemptType             = ${FAKE_PREEMPT_TYPE:-preempt/partition_prio}"
    exit 0
fi
if [ "$1 $2 $3" = "-o show partition" ]; then
    echo "PartitionName=$4 PriorityTier=1 PreemptMode=${FAKE_PREEMPT_MODE:-OFF} GraceTime=30"
    exit 0
fi
printf '%s\\n' "$@" >> "$FAKE_DIR/scontrol"
"""
FAKE_CTRAIN = """#!/bin/bash
# A stand-in for `ctrain resolve IMAGE`, `ctrain carried` and `ctrain job preflight`: records
# each argv, prints where the image would be, the carried launcher's mounts, or the verdict.
if [ "$1 $2" = "job preflight" ]; then
    # The preflight: before training (no exit code) it says $FAKE_BEFORE (go) and exits with
    # $FAKE_BEFORE_EXIT, after a failed step $FAKE_AFTER (end 3) and $FAKE_AFTER_EXIT; each call is
    # recorded in $FAKE_DIR/preflight.
    printf '%s\\n' "${3:-before}" >> "$FAKE_DIR/preflight"
    if [ -n "${3:-}" ]; then
        echo "${FAKE_AFTER:-end 3}"
        exit "${FAKE_AFTER_EXIT:-0}"
    fi
    echo "${FAKE_BEFORE:-go}"
    exit "${FAKE_BEFORE_EXIT:-0}"
fi
printf '%s\\n' "$@" >> "$FAKE_DIR/ctrain"
[ -n "${FAKE_RESOLVE_EXIT:-}" ] && exit "$FAKE_RESOLVE_EXIT"
[ "$1" = resolve ] && echo "/pulled/$2"
[ "$1" = carried ] && echo "/site/ctrain:/opt/ctrain-carried/api/ctrain:ro"
exit 0
"""


def add_fakes(root: Path) -> Path:
    """``root`` as a sandbox with the fakes on its PATH."""
    box = sandbox(root)
    programs = {"srun": FAKE_STEP, "mpirun": FAKE_STEP, "scontrol": FAKE_SCONTROL}
    for name, text in {**programs, "ctrain": FAKE_CTRAIN}.items():
        box.add_program(name, text)
    return root


def env(fakes: Path, **extra: str) -> dict[str, str]:
    return sandbox(
        fakes,
        FAKE_DIR=str(fakes),
        SLURM_JOB_ID="77",
        SLURM_NTASKS="2",
        SLURM_JOB_NODELIST="node1",
        SLURM_JOB_PARTITION="low",
        **extra,
    ).env
