"""Per-rank preparation as a pure function: GPUs, ports, TF_CONFIG, proxies and environment.

``make_plan`` turns the job environment and the launch options into a ``Plan``; ``child_environ``
applies it to an environment. Nothing here reads the process environment or starts anything.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ctrain.errors import LaunchError
from ctrain.launch.gloo import Rendezvous, horovod_environment, rendezvous, uses_gloo
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.modes import Placement, choose_mode, placement
from ctrain.launch.tuning import Cpus, Tuned, to_set, tune
from ctrain.names import AUTO, KERAS_2, Launched, Mode
from ctrain.settings import Settings
from ctrain.util.secrets import masked
from ctrain.util.shipped import shipped_dir

PROXY_VARIABLES = tuple(
    name
    for base in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy")
    for name in (base, base.upper())
)
PORT_SPAN = (
    12000  # ports come from [port_base, port_base + PORT_SPAN): below Linux's ephemeral range
)
PORT_BLOCK = 64  # ports a job step may use on one node: one per local rank

# Settings users otherwise set by hand. Each is set only when the environment does not already
# have it, so a site or a user overrides any of them by exporting it.
DEFAULTS: dict[str, str] = {
    "PYTHONNOUSERSITE": "1",  # ~/.local packages never shadow the image's or the venv's
    "TF_FORCE_GPU_ALLOW_GROWTH": "true",  # ranks sharing a node do not grab all GPU memory
    "TF_CPP_MIN_LOG_LEVEL": "1",  # TensorFlow's info lines off, warnings kept
    "NCCL_DEBUG": "WARN",  # NCCL problems are printed, not silent stalls
    "NCCL_ASYNC_ERROR_HANDLING": "1",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",  # CMA fails in containers
    "HOROVOD_STALL_CHECK_TIME_SECONDS": "60",
}


class LaunchOptions(NamedTuple):
    mode: str = AUTO
    collective: str = AUTO
    collective_timeout: int = 600
    port_base: int = 20000
    keep_proxies: bool = False
    keras: str = AUTO
    tune: str = AUTO
    skip_mpi_check: bool = False

    @classmethod
    def from_settings(cls, s: Settings) -> LaunchOptions:
        return cls(
            mode=s.mode,
            collective=s.collective,
            collective_timeout=s.collective_timeout,
            port_base=s.port_base,
            keep_proxies=s.keep_proxies,
            keras=s.keras,
            tune=s.tune,
            skip_mpi_check=s.skip_mpi_check,
        )


class Plan(NamedTuple):
    mode: Mode
    place: Placement
    hosts: tuple[str, ...]  # the job's nodes, in Slurm's order
    ports: tuple[int, ...]  # the port of each rank (multiworker), by rank
    gpus: tuple[str, ...]  # the GPUs this rank uses
    collective: str
    tf_config: dict[str, Any] | None
    env_set: dict[str, str]
    env_unset: tuple[str, ...]
    tuned: tuple[Tuned, ...] = ()  # thread and polling defaults (launch/tuning.py)
    rendezvous: Rendezvous | None = None  # Horovod over Gloo (launch/gloo.py)

    def explain(self) -> dict[str, Any]:
        """The plan as ``ctrain launch --explain --json`` prints it."""
        return {
            "mode": self.mode.value,
            "rank": self.place.rank,
            "world_size": self.place.size,
            "local_rank": self.place.local_rank,
            "local_size": self.place.local_size,
            "rank_source": self.place.source,
            "hosts": list(self.hosts),
            "ports": list(self.ports),
            "gpus": list(self.gpus),
            "collective": self.collective,
            "tf_config": self.tf_config,
            "env": {
                "set": {k: masked(k, v) for k, v in sorted(self.env_set.items())},
                "unset": list(self.env_unset),
            },
            "tuning": [t._asdict() for t in self.tuned],
            "rendezvous": self.rendezvous.explain() if self.rendezvous else None,
        }

    def banner(self) -> str:
        gpus = ",".join(self.gpus) if self.gpus else "none"
        nodes = len(self.hosts) or 1
        return (
            f"ctrain: mode={self.mode.value} world_size={self.place.size} nodes={nodes} "
            f"gpus/rank={gpus} collective={self.collective} ranks-from={self.place.source}"
        )


LEGACY_KERAS = "TF_USE_LEGACY_KERAS"  # TensorFlow's switch: tf.keras is tf-keras, not Keras 3
KERAS3_HOOK = "train/keras3_site"  # package data: the start-up hook of Keras 3 multiworker runs


def script_of(command: Sequence[str]) -> str | None:
    """The training script of a command: its first argument ending in ``.py``."""
    return next((arg for arg in command if arg.endswith(".py")), None)


def imports_keras(source: str) -> bool:
    """Whether Python ``source`` imports ``keras`` itself (``import keras``, ``from keras...``),
    rather than through ``tf.keras``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        else:
            continue
        if any(name == "keras" or name.startswith("keras.") for name in names):
            return True
    return False


def tf_keras_chosen(exported: str | None) -> bool:
    """TensorFlow's reading of TF_USE_LEGACY_KERAS: is ``tf.keras`` tf-keras?"""
    return exported in ("1", "true", "True")


def legacy_keras(choice: str, script_imports_keras: bool, exported: str | None) -> bool:
    """Whether the script runs on tf-keras (TF_USE_LEGACY_KERAS=1) rather than Keras 3.

    CTRAIN_KERAS=2 or 3 decides. With auto, an exported TF_USE_LEGACY_KERAS is kept (read as
    TensorFlow reads it); else Keras 3 exactly when the script imports keras itself.
    """
    if choice != AUTO:
        return choice == KERAS_2
    if exported is not None:
        return tf_keras_chosen(exported)
    return not script_imports_keras


def _keras_environment(
    environ: Mapping[str, str], choice: str, script_imports_keras: bool, mode: Mode
) -> dict[str, str]:
    exported = environ.get(LEGACY_KERAS)
    legacy = legacy_keras(choice, script_imports_keras, exported)
    env = {} if choice == AUTO and exported is not None else {LEGACY_KERAS: "1" if legacy else "0"}
    if mode is Mode.MULTIWORKER and not legacy:
        path = [str(shipped_dir(KERAS3_HOOK)), environ.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = ":".join(part for part in path if part)
    return env


def worker_hosts(
    nodes: tuple[str, ...],
    tasks_per_node: tuple[int, ...],
    size: int,
    distribution: str,
    plane_size: str | None = None,
) -> tuple[str, ...]:
    """The node of every rank, as Slurm lays out the step (``SLURM_DISTRIBUTION``): block (each
    node's tasks together), cyclic (one task per node in turn) or plane (``plane_size`` tasks,
    ``SLURM_DIST_PLANESIZE``, per node in turn); the part after ':' is within a node."""
    counts = list(tasks_per_node) if tasks_per_node else [1] * len(nodes)
    if sum(counts) != size:
        raise LaunchError(
            f"the step's tasks per node {counts} do not add up to its {size} tasks",
            "launch with srun so Slurm sets SLURM_STEP_TASKS_PER_NODE",
        )
    per_turn = size
    if distribution.startswith("cyclic"):
        per_turn = 1
    elif distribution.startswith("plane"):
        text = (plane_size or "").strip()
        if not text.isdigit() or int(text) < 1:
            raise LaunchError(
                f"SLURM_DISTRIBUTION={distribution} but SLURM_DIST_PLANESIZE={plane_size!r}",
                "launch with srun -m plane=N so Slurm sets both",
            )
        per_turn = int(text)
    left, order = counts[:], list[str]()
    while len(order) < size:
        for index, node in enumerate(nodes):
            taken = min(per_turn, left[index])
            left[index] -= taken
            order += [node] * taken
    return tuple(order)


def port_block(job_id: str | None, step_id: str | None) -> int:
    """A block of ports for this job step: consecutive job ids and steps get distinct blocks."""
    job = int(job_id) if job_id and job_id.isdigit() else 0
    step = int(step_id) if step_id and step_id.isdigit() else 0
    return (job * 7 + step) % (PORT_SPAN // PORT_BLOCK)


def worker_ports(hosts: tuple[str, ...], base: int, block: int) -> tuple[int, ...]:
    """One port per rank: the step's block, offset by the rank's index on its own node."""
    seen: dict[str, int] = {}
    ports = []
    for host in hosts:
        index = seen.get(host, 0)
        seen[host] = index + 1
        if index >= PORT_BLOCK:
            raise LaunchError(
                f"{index + 1} ranks on {host}; ctrain gives at most {PORT_BLOCK} per node",
                "use fewer tasks per node",
            )
        ports.append(base + block * PORT_BLOCK + index)
    if ports and max(ports) > 65535:
        raise LaunchError(f"port {max(ports)} is above 65535", "lower CTRAIN_PORT_BASE")
    return tuple(ports)


def pin_gpus(
    mode: Mode, visible: tuple[str, ...], local_rank: int, local_size: int
) -> tuple[str, ...]:
    """The GPUs a rank uses, chosen among those it can already see."""
    if not visible:
        return ()
    if mode is Mode.MIRRORED:
        return visible
    if mode is Mode.SINGLE or len(visible) == 1:
        return visible[:1]
    if len(visible) < local_size:
        raise LaunchError(
            f"{local_size} ranks on this node but only {len(visible)} GPUs visible "
            f"({','.join(visible)})",
            "ask Slurm for one GPU per task (--gpus-per-task=1) or fewer tasks per node",
        )
    return (visible[local_rank],)


def _no_proxy(environ: Mapping[str, str], hosts: tuple[str, ...]) -> str:
    entries: list[str] = []
    for item in (environ.get("no_proxy") or environ.get("NO_PROXY") or "").split(","):
        if item.strip():
            entries.append(item.strip())
    for item in ("localhost", "127.0.0.1", *hosts):
        if item not in entries:
            entries.append(item)
    return ",".join(entries)


def _environment(
    environ: Mapping[str, str],
    options: LaunchOptions,
    mode: Mode,
    place: Placement,
    gpus: tuple[str, ...] | None,
    collective: str,
    tf_config: dict[str, Any] | None,
    hosts: tuple[str, ...],
    tuned: tuple[Tuned, ...],
    script_imports_keras: bool,
) -> tuple[dict[str, str], tuple[str, ...]]:
    env = {key: value for key, value in DEFAULTS.items() if key not in environ}
    env.update(_keras_environment(environ, options.keras, script_imports_keras, mode))
    launched = Launched(
        mode,
        place.rank,
        place.size,
        place.local_rank,
        place.local_size,
        collective,
        options.collective_timeout,
    )
    env.update(launched.to_env())
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    if tf_config is not None:
        import json  # only multiworker needs it; `launch --explain` starts at Click's speed

        env["TF_CONFIG"] = json.dumps(tf_config, separators=(",", ":"))
    if mode is Mode.HOROVOD and "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" not in environ:
        env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = str(options.collective_timeout)
    env.update(to_set(tuned))
    cuda_home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    xla = environ.get("XLA_FLAGS", "")
    if cuda_home and "xla_gpu_cuda_data_dir" not in xla:
        env["XLA_FLAGS"] = f"{xla} --xla_gpu_cuda_data_dir={cuda_home}".strip()
    env["no_proxy"] = env["NO_PROXY"] = _no_proxy(environ, hosts)
    env["no_grpc_proxy"] = env["NO_GRPC_PROXY"] = env["no_proxy"]
    unset: tuple[str, ...] = ()
    if not options.keep_proxies:
        unset = tuple(name for name in PROXY_VARIABLES if name in environ)
    return env, unset


def _workers(
    job: JobEnv, place: Placement, port_base: int, environ: Mapping[str, str]
) -> tuple[tuple[int, ...], dict[str, Any]]:
    """MultiWorkerMirroredStrategy's ports, one per rank, and this rank's TF_CONFIG."""
    slurm = job.slurm
    if slurm.nodes and place.source == "slurm":
        by_rank = worker_hosts(
            slurm.nodes,
            slurm.tasks_per_node,
            place.size,
            environ.get("SLURM_DISTRIBUTION", "block"),
            environ.get("SLURM_DIST_PLANESIZE"),
        )
    elif place.size == place.local_size:
        by_rank = (job.hostname,) * place.size
    else:
        raise LaunchError(
            "multiworker across nodes needs Slurm's node list, and this launch has none",
            "start the ranks with srun, or use --mode horovod under mpirun",
        )
    ports = worker_ports(by_rank, port_base, port_block(slurm.job_id, slurm.step_id))
    tf_config = {
        "cluster": {"worker": [f"{h}:{p}" for h, p in zip(by_rank, ports, strict=True)]},
        "task": {"type": "worker", "index": place.rank},
    }
    return ports, tf_config


def make_plan(
    job: JobEnv,
    options: LaunchOptions,
    environ: Mapping[str, str],
    visible_gpus: tuple[str, ...],
    script_imports_keras: bool = False,
    cpus: Cpus | None = None,
) -> Plan:
    """Everything this rank needs before the training command starts.

    ``visible_gpus`` are the GPUs this process can see (from the job environment, or detected);
    ``script_imports_keras``: the training script imports ``keras`` itself (``imports_keras``);
    ``cpus``: this process's CPU mask and its node's CPUs, for the thread defaults.
    """
    mode = choose_mode(options.mode, job, len(visible_gpus))
    place = placement(mode, job)
    slurm = job.slurm
    hosts = slurm.nodes
    ports: tuple[int, ...] = ()
    tf_config: dict[str, Any] | None = None
    if mode is Mode.MULTIWORKER:
        ports, tf_config = _workers(job, place, options.port_base, environ)
    meet = None
    if uses_gloo(mode, job, place.size):
        last = (port_block(slurm.job_id, slurm.step_id) + 1) * PORT_BLOCK - 1
        meet = rendezvous(job, place, options.port_base + last)
    gpus = pin_gpus(mode, visible_gpus, place.local_rank, place.local_size)
    collective = options.collective
    if collective == AUTO:
        collective = "nccl" if gpus else "ring"
    pinned = gpus if visible_gpus else None
    tuned = tune(environ, options.tune, mode, place.local_size, slurm.cpus_per_task, cpus)
    env_set, env_unset = _environment(
        environ,
        options,
        mode,
        place,
        pinned,
        collective,
        tf_config,
        hosts,
        tuned,
        script_imports_keras,
    )
    if meet is not None:
        env_set.update(horovod_environment(meet, place))
    return Plan(
        mode, place, hosts, ports, gpus, collective, tf_config, env_set, env_unset, tuned, meet
    )


def child_environ(environ: Mapping[str, str], plan: Plan) -> dict[str, str]:
    """The environment the training command starts with."""
    env = {key: value for key, value in environ.items() if key not in plan.env_unset}
    env.update(plan.env_set)
    return env
