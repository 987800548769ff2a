"""Per-rank preparation as a pure function: GPUs, ports, TF_CONFIG, proxies and environment.

``make_plan`` turns the job environment and the launch options into a ``Plan``; ``child_environ``
applies it to an environment. Nothing here reads the process environment or starts anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from ctrain.errors import LaunchError
from ctrain.launch.gloo import (
    Rendezvous,
    ctrain_plans_gloo,
    horovod_environment,
    on_gloo_alone,
    plan_rendezvous,
)
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.keras import keras_environment
from ctrain.launch.modes import Placement, choose_mode, placement
from ctrain.launch.peers import peer_watch_address, watches_peers
from ctrain.launch.ports import RENDEZVOUS_SLOT, Ephemeral, PortWindow, choose_window, worker_ports
from ctrain.launch.profile import Process, profile_environment, profiled
from ctrain.launch.tuning import Cpus, Tuned, to_set, tune
from ctrain.names import AUTO, ENV_LAUNCH_PEER_WATCH, Launched, Mode
from ctrain.profile_window import StepWindow, window_of
from ctrain.settings_table import BY_NAME, DEFAULT_SETTINGS, Settings
from ctrain.util.secrets import masked

PROXY_VARIABLES = tuple(
    name
    for base in ("http_proxy", "https_proxy", "all_proxy", "grpc_proxy")
    for name in (base, base.upper())
)

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
    """What ``ctrain launch`` was asked; each default is its setting's (settings_table.py)."""

    mode: str = DEFAULT_SETTINGS.mode
    collective: str = DEFAULT_SETTINGS.collective
    collective_timeout: int = DEFAULT_SETTINGS.collective_timeout
    port_base: int = DEFAULT_SETTINGS.port_base
    port_base_chosen: bool = False  # set by the user, so kept or refused, never moved
    keep_proxies: bool = DEFAULT_SETTINGS.keep_proxies
    keras: str = DEFAULT_SETTINGS.keras
    tune: str = DEFAULT_SETTINGS.tune
    skip_mpi_check: bool = DEFAULT_SETTINGS.skip_mpi_check
    profile: StepWindow | None = window_of(DEFAULT_SETTINGS.profile)  # steps to trace
    profile_dir: str = DEFAULT_SETTINGS.profile_dir
    profile_ranks: str = DEFAULT_SETTINGS.profile_ranks

    @classmethod
    def from_settings(cls, settings: Settings) -> LaunchOptions:
        """Each field that names a setting takes its value; port_base_chosen, where it came from."""
        given = {name: getattr(settings, name) for name in cls._fields if name in BY_NAME}
        chosen = settings.sources.get("port_base", "default") != "default"
        return cls(**given | {"profile": window_of(settings.profile), "port_base_chosen": chosen})


class Plan(NamedTuple):
    mode: Mode
    place: Placement
    hosts: tuple[str, ...]  # the job's nodes, in Slurm's order
    ports: tuple[int, ...]  # the port of each rank (multiworker), by rank
    gpus: tuple[str, ...]  # the GPUs this rank uses
    collective: str
    collective_timeout: int  # seconds; also the Horovod rendezvous' wait (launch/start.py)
    tf_config: dict[str, Any] | None
    env_set: dict[str, str]
    env_unset: tuple[str, ...]
    tuned: tuple[Tuned, ...] = ()  # thread and polling defaults (launch/tuning.py)
    rendezvous: Rendezvous | None = None  # Horovod over Gloo that ctrain starts (launch/gloo.py)
    port_window: PortWindow | None = None  # where ports came from, when the mode listens on any
    gloo: bool = False  # Horovod runs on Gloo alone, without MPI (gloo.on_gloo_alone)

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
            "port_window": (
                {
                    "first": self.port_window.base,
                    "last": self.port_window.last,
                    "moved": self.port_window.moved or None,
                }
                if self.port_window
                else None
            ),
        }

    def banner(self) -> str:
        gpus = ",".join(self.gpus) if self.gpus else "none"
        nodes = len(self.hosts) or 1
        return (
            f"ctrain: mode={self.mode.value} world_size={self.place.size} nodes={nodes} "
            f"gpus/rank={gpus} collective={self.collective} ranks-from={self.place.source}"
        )


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


class Rank(NamedTuple):
    """What describes this rank, for its environment (``_environment``)."""

    mode: Mode
    place: Placement
    gpus: tuple[str, ...] | None  # CUDA_VISIBLE_DEVICES; None: not pinned (none were visible)
    collective: str
    tf_config: dict[str, Any] | None
    hosts: tuple[str, ...]  # the job's nodes, kept off the proxies
    tuned: tuple[Tuned, ...]
    script_imports_keras: bool
    watch: str | None  # the peer-loss watch's HOST:PORT (launch/peers.py)


def _environment(
    environ: Mapping[str, str], options: LaunchOptions, rank: Rank
) -> tuple[dict[str, str], tuple[str, ...]]:
    env = {key: value for key, value in DEFAULTS.items() if key not in environ}
    hook = options.profile is not None or rank.watch is not None
    env.update(
        keras_environment(environ, options.keras, rank.script_imports_keras, hook, rank.mode)
    )
    launched = Launched(
        mode=rank.mode,
        rank=rank.place.rank,
        size=rank.place.size,
        local_rank=rank.place.local_rank,
        local_size=rank.place.local_size,
        collective=rank.collective,
        collective_timeout=options.collective_timeout,
    )
    env.update(launched.to_env())
    if rank.watch is not None:
        env[ENV_LAUNCH_PEER_WATCH] = rank.watch
    if rank.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(rank.gpus)
    if rank.tf_config is not None:
        import json  # only multiworker needs it; `launch --explain` starts at Click's speed

        env["TF_CONFIG"] = json.dumps(rank.tf_config, separators=(",", ":"))
    if rank.mode is Mode.HOROVOD and "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" not in environ:
        env["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = str(options.collective_timeout)
    env.update(to_set(rank.tuned))
    cuda_home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    xla = environ.get("XLA_FLAGS", "")
    if cuda_home and "xla_gpu_cuda_data_dir" not in xla:
        env["XLA_FLAGS"] = f"{xla} --xla_gpu_cuda_data_dir={cuda_home}".strip()
    env["no_proxy"] = env["NO_PROXY"] = _no_proxy(environ, rank.hosts)
    env["no_grpc_proxy"] = env["NO_GRPC_PROXY"] = env["no_proxy"]
    unset: tuple[str, ...] = ()
    if not options.keep_proxies:
        unset = tuple(name for name in PROXY_VARIABLES if name in environ)
    return env, unset


def _workers(
    job: JobEnv, place: Placement, window: PortWindow, environ: Mapping[str, str]
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
    ports = worker_ports(by_rank, window, window.block(slurm.job_id, slurm.step_id))
    tf_config = {
        "cluster": {"worker": [f"{h}:{p}" for h, p in zip(by_rank, ports, strict=True)]},
        "task": {"type": "worker", "index": place.rank},
    }
    return ports, tf_config


def _profile(
    options: LaunchOptions,
    mode: Mode,
    place: Placement,
    environ: Mapping[str, str],
    process: Process | None,
) -> dict[str, str]:
    assert options.profile is not None
    decided = profiled(
        options.profile,
        options.profile_ranks,
        options.profile_dir,
        mode,
        place.rank,
        place.size,
        environ,
        process or Process(".", 0, 0),
    )
    return profile_environment(decided, mode, environ)


def _listening(
    mode: Mode,
    job: JobEnv,
    place: Placement,
    options: LaunchOptions,
    environ: Mapping[str, str],
    ephemeral: Ephemeral | None,
) -> tuple[
    PortWindow | None, tuple[int, ...], dict[str, Any] | None, Rendezvous | None, str | None
]:
    """The ports of the modes whose ranks listen: the window they come from, multiworker's port
    per rank and TF_CONFIG, Horovod over Gloo's rendezvous (the last port of the step's block),
    the peer-loss watch's HOST:PORT where rank 0 listens for it (launch/peers.py)."""
    gloo = ctrain_plans_gloo(mode, job, place.size)
    watch = watches_peers(mode, job, place.size)
    if mode is not Mode.MULTIWORKER and not gloo and not watch:
        return None, (), None, None, None
    window = choose_window(options.port_base, options.port_base_chosen, ephemeral)
    ports: tuple[int, ...] = ()
    tf_config = None
    if mode is Mode.MULTIWORKER:
        ports, tf_config = _workers(job, place, window, environ)
    rendezvous = None
    if gloo:
        port = window.step_port(job.slurm.job_id, job.slurm.step_id, RENDEZVOUS_SLOT)
        rendezvous = plan_rendezvous(job, place, port)
    return window, ports, tf_config, rendezvous, peer_watch_address(job, window) if watch else None


def make_plan(
    job: JobEnv,
    options: LaunchOptions,
    environ: Mapping[str, str],
    visible_gpus: tuple[str, ...],
    script_imports_keras: bool = False,
    cpus: Cpus | None = None,
    process: Process | None = None,
    ephemeral: Ephemeral | None = None,
) -> Plan:
    """Everything this rank needs before the training command starts.

    ``visible_gpus`` are the GPUs this process can see (from the job environment, or detected);
    ``script_imports_keras``: the training script imports ``keras`` itself (``imports_keras``);
    ``cpus``: this process's CPU mask and its node's CPUs, for the thread defaults;
    ``process``: its working directory and process ids, for ``--profile``'s run directory;
    ``ephemeral``: its node's ephemeral port range, which the ports keep clear of (launch/ports.py).
    """
    mode = choose_mode(options.mode, job, len(visible_gpus))
    place = placement(mode, job)
    window, ports, tf_config, rendezvous, watch = _listening(
        mode, job, place, options, environ, ephemeral
    )
    gpus = pin_gpus(mode, visible_gpus, place.local_rank, place.local_size)
    collective = options.collective if options.collective != AUTO else "nccl" if gpus else "ring"
    tuned = tune(
        environ, options.tune, mode, place.local_size, job.slurm.cpus_per_task, cpus, len(gpus)
    )
    rank = Rank(
        mode=mode,
        place=place,
        gpus=gpus if visible_gpus else None,
        collective=collective,
        tf_config=tf_config,
        hosts=job.slurm.nodes,
        tuned=tuned,
        script_imports_keras=script_imports_keras,
        watch=watch,
    )
    env_set, env_unset = _environment(environ, options, rank)
    if rendezvous is not None:
        env_set.update(horovod_environment(rendezvous, place))
    if options.profile is not None:
        env_set.update(_profile(options, mode, place, environ, process))
    return Plan(
        mode=mode,
        place=place,
        hosts=job.slurm.nodes,
        ports=ports,
        gpus=gpus,
        collective=collective,
        collective_timeout=options.collective_timeout,
        tf_config=tf_config,
        env_set=env_set,
        env_unset=env_unset,
        tuned=tuned,
        rendezvous=rendezvous,
        port_window=window,
        gloo=on_gloo_alone(mode, job, place.size),
    )


def child_environ(environ: Mapping[str, str], plan: Plan) -> dict[str, str]:
    """The environment the training command starts with."""
    env = {key: value for key, value in environ.items() if key not in plan.env_unset}
    env.update(plan.env_set)
    return env
