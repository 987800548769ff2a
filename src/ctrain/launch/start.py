"""``ctrain launch``: read this rank's environment, prepare it, and exec the training command.

The image's entrypoint. It stays light: no TensorFlow is imported before the exec.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from ctrain.checkline import warning_line
from ctrain.errors import LaunchError
from ctrain.launch import mpilibs
from ctrain.launch.gloo import server_command
from ctrain.launch.gpus import code_verdict, visible_gpus
from ctrain.launch.interpreter import Holds, has, runs_this_interpreter, this_interpreter
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.keras import imports_keras, script_of
from ctrain.launch.mpicheck import MpiVerdict
from ctrain.launch.plan import LaunchOptions, Plan, child_environ, make_plan
from ctrain.launch.ports import Ephemeral
from ctrain.launch.profile import Process
from ctrain.launch.tuning import Cpus
from ctrain.names import ENV_CARRIED, KERAS_2, STOP_SIGNALS, Mode
from ctrain.settings_table import Settings
from ctrain.util import proc
from ctrain.util.secrets import masked


def _check_horovod() -> None:
    if not has("horovod"):
        raise LaunchError(
            f"Horovod mode, but {sys.executable} has no Horovod",
            "run TensorFlow's own collectives (--mode multiworker under srun), or use an image "
            "with Horovod (ctrain's; NGC's nvcr.io/nvidia/tensorflow:25.02-tf2-py3)",
        )


def _check_image(
    command: Sequence[str], options: LaunchOptions, environ: Mapping[str, str]
) -> None:
    """What the image's interpreter must hold, refused before the command starts: TensorFlow,
    where the launcher was carried into an image (boot.sh sets ENV_CARRIED) and the command runs
    on this interpreter; tf-keras, where Keras 2 is asked for."""
    carried = environ.get(ENV_CARRIED)
    if carried and runs_this_interpreter(command, environ) and not has("tensorflow"):
        raise LaunchError(
            f"{carried} has no TensorFlow",
            "use an image with TensorFlow, name the interpreter of an environment that has it "
            "(an overlay's: ctrain exec --image-python /ext3/env/bin/python), or run a script "
            "that needs none as it is: ctrain exec --no-launch",
        )
    if options.keras == KERAS_2 and not has("tf_keras"):
        raise LaunchError(
            f"--keras 2 (tf-keras), but {sys.executable} has no tf-keras",
            "use Keras 3 (--keras 3, or auto), or install tf-keras into the image's environment",
        )


def _check_port_free(port: int) -> None:
    """A taken port fails now with its number, not later as a gRPC hang."""
    import socket  # here, not at the top: `launch --explain` starts at Click's speed

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", port))
        except OSError as exc:
            raise LaunchError(
                f"port {port} for this rank is in use ({exc.strerror})",
                "another job uses it: set CTRAIN_PORT_BASE to another value for this job",
            ) from exc


def script_imports_keras(command: Sequence[str]) -> bool:
    """Whether the command's training script (if it names one that is readable) imports keras."""
    script = script_of(command)
    if script is None:
        return False
    try:
        with open(script, encoding="utf-8", errors="replace") as file:
            return imports_keras(file.read())
    except OSError:
        return False


def this_cpus() -> Cpus:
    """This process's CPU mask and its node's CPUs."""
    node = os.cpu_count() or 1
    getaffinity = getattr(os, "sched_getaffinity", None)  # Linux only
    return Cpus(len(getaffinity(0)) if getaffinity else node, node)


EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
RESERVED_PORTS = "/proc/sys/net/ipv4/ip_local_reserved_ports"


def this_ephemeral() -> Ephemeral | None:
    """This node's (this network namespace's) ephemeral port range; None where there is none to
    read (not Linux)."""
    try:
        with open(EPHEMERAL_RANGE, encoding="ascii") as file:
            port_range = file.read()
    except OSError:
        return None
    try:
        with open(RESERVED_PORTS, encoding="ascii") as file:
            reserved = file.read()
    except OSError:
        reserved = ""
    return Ephemeral.parse(port_range, reserved)


def this_process() -> Process:
    """This process's working directory and ids (``--profile``'s run directory)."""
    return Process(os.getcwd(), os.getpid(), os.getppid())


def prepare(
    options: LaunchOptions, environ: Mapping[str, str], command: Sequence[str] = ()
) -> Plan:
    """The plan for this process, from its real environment and the command it will run."""
    job = JobEnv.from_environ(environ, os.uname().nodename)
    gpus = visible_gpus(job, environ)
    _check_image(command, options, environ)
    keras3 = script_imports_keras(command) or not has("tf_keras")  # Keras 3: TensorFlow's own
    plan = make_plan(
        job, options, environ, gpus, keras3, this_cpus(), this_process(), this_ephemeral()
    )
    if plan.mode is Mode.HOROVOD:
        _check_horovod()
    mpilibs.enforce(mpi_verdict(plan, options, environ), plan.place.rank)
    return plan


def mpi_verdict(plan: Plan, options: LaunchOptions, environ: Mapping[str, str]) -> MpiVerdict:
    """The launcher's MPI against the image's, for this plan (docs/mpi-and-network.md)."""
    return mpilibs.check(
        plan.mode, {**environ, **plan.env_set}, gloo=plan.gloo, skip=options.skip_mpi_check
    )


def explain(
    plan: Plan, as_json: bool, mpi: MpiVerdict | None = None, holds: Holds | None = None
) -> str:
    """The plan as ``--explain`` prints it; with ``mpi``, JSON shows the MPI check's verdict,
    with ``holds``, the interpreter and what it holds."""
    if as_json:
        import json

        shown = plan.explain()
        shown |= {} if mpi is None else {"mpi_check": mpi.explain()}
        shown |= {} if holds is None else {"interpreter": holds.explain()}
        return json.dumps(shown, indent=2)
    tuned = {t.name for t in plan.tuned}
    lines = [plan.banner()]
    lines += [f"  {line}" for line in (holds.lines() if holds else ())]
    set_ = sorted(plan.env_set.items())
    lines += [f"  set   {k}={masked(k, v)}" for k, v in set_ if k not in tuned]
    lines += [f"  unset {k}" for k in plan.env_unset]
    lines += [
        f"  {'keep ' if t.kept else 'tune '} {t.name}={t.value}  # {t.reason}" for t in plan.tuned
    ]
    return "\n".join(lines)


def _answers(addr: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((addr, port), timeout=1.0):
            return True
    except OSError:
        return False


def await_rendezvous(plan: Plan, environ: Mapping[str, str], timeout: float) -> None:
    """Horovod over Gloo: rank 0 starts the rendezvous server; every rank waits until it answers
    (Horovod itself gives up on a refused connection after 1.5 s)."""
    import time

    rendezvous = plan.rendezvous
    if rendezvous is None:
        return
    server = None
    if plan.place.rank == 0:
        _check_port_free(rendezvous.port)
        argv = server_command(sys.executable, rendezvous, plan.place.size, os.getpid())
        server = proc.spawn_detached(argv, environ)
    deadline = time.monotonic() + timeout
    while not _answers(rendezvous.addr, rendezvous.port):
        if server is not None and server.poll() is not None:
            raise LaunchError(
                f"Horovod's rendezvous server on port {rendezvous.port} ended at once "
                f"(exit {server.returncode})",
                f"check that `{sys.executable} -c 'import horovod.runner'` works in the image",
            )
        if time.monotonic() > deadline:
            raise LaunchError(
                f"rank {plan.place.rank}: no Horovod rendezvous at "
                f"{rendezvous.addr}:{rendezvous.port} after {timeout:.0f} s",
                "check that rank 0 started on the first node and that the nodes reach each other",
            )
        time.sleep(0.2)


def _warn_gpu_code(environ: Mapping[str, str]) -> None:
    """One line when this node's GPUs or driver cannot run the TensorFlow here as it is, or run it
    only after compiling its kernels (ctrain doctor's gpu-code line; silent where the TensorFlow's
    GPU code is not known)."""
    verdict = code_verdict(environ)
    if verdict.status != "PASS" and verdict.fix:
        print(warning_line(verdict.detail, verdict.fix), file=sys.stderr, flush=True)


def restore_stop_signals() -> list[str]:
    """Give the stop signals their default back where this process inherited them ignored (a
    job script's ``trap '' TERM``, a wrapper that shields itself): an ignored signal stays
    ignored across exec, and a script that never asked ctrain to stop it would train on until
    SIGKILL. The names of those given back."""
    restored = []
    for signum in STOP_SIGNALS:
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            restored.append(signal.Signals(signum).name)
    return restored


def exec_plan(
    plan: Plan, command: Sequence[str], environ: Mapping[str, str], quiet: bool
) -> NoReturn:
    """Exec ``command`` in place of this process with the plan's environment."""
    if not command:
        raise LaunchError("no command given", "put it after --: ctrain launch -- python train.py")
    if plan.ports:
        _check_port_free(plan.ports[plan.place.rank])
    await_rendezvous(plan, environ, float(plan.collective_timeout))
    if plan.place.rank == 0 and not quiet:
        print(plan.banner(), file=sys.stderr, flush=True)
        if plan.port_window is not None and plan.port_window.moved:
            print(f"ctrain: {plan.port_window.moved}", file=sys.stderr, flush=True)
        if plan.gpus:
            _warn_gpu_code(environ)
    restored = restore_stop_signals()
    if restored and plan.place.rank == 0 and not quiet:
        print(
            f"ctrain: {' and '.join(restored)} came ignored from whoever started this rank; the "
            "training gets the default back (Slurm's stop requests must reach it)",
            file=sys.stderr,
            flush=True,
        )
    proc.exec_replace(command, child_environ(environ, plan))


def run(
    settings: Settings,
    command: Sequence[str],
    environ: Mapping[str, str],
    explain_only: bool = False,
    as_json: bool = False,
) -> None:
    """``ctrain launch``: this rank's plan from ``settings``, then the command exec'd in place of
    this process; with ``explain_only``, the plan and what the interpreter holds printed instead."""
    options = LaunchOptions.from_settings(settings)
    plan = prepare(options, environ, command)
    if explain_only:
        verdict = mpi_verdict(plan, options, environ)
        print(explain(plan, as_json, verdict, this_interpreter(environ)), flush=True)
        return
    exec_plan(plan, command, environ, quiet=settings.quiet)
