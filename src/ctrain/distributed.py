"""The training-script API: one script, any mode.

    import ctrain.distributed
    ctx = ctrain.distributed.init()
    with ctx.scope():
        model = build_model()
        model.compile(optimizer=ctx.optimizer(SGD(ctx.scale_lr(0.01))), ...)
    model.fit(ctx.shard(dataset).batch(ctx.batch_size(32)), callbacks=ctx.callbacks(),
              verbose=ctx.verbose)
    if ctx.is_chief: model.save(...)

Under ``ctrain launch`` the mode and ranks come from the CTRAIN_* variables it set; run directly
(``python train.py``, ``srun python train.py``) the same plan is made here.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctrain.errors import ConfigError, LaunchError
from ctrain.launch.jobenv import JobEnv
from ctrain.launch.keras import LEGACY_KERAS, tf_keras_chosen
from ctrain.launch.plan import LaunchOptions, make_plan
from ctrain.launch.profile import profiled
from ctrain.launch.start import script_imports_keras, this_process
from ctrain.names import Launched as Launched
from ctrain.names import Mode
from ctrain.profile_window import AUTO_RANKS, DEFAULT_PROFILE_DIR, check_ranks, parse_window
from ctrain.settings import resolve
from ctrain.train import peerwatch, profiling, stopping
from ctrain.train import steps as step_hooks
from ctrain.train.checkpoints import REQUEUE_EXIT_CODE as REQUEUE_EXIT_CODE


def prepare_environ(environ: MutableMapping[str, str], script: str | None = None) -> Launched:
    """Make the launch plan here when the script was started without ``ctrain launch``;
    ``script``, the training script, decides the Keras as ``ctrain launch`` would."""
    launched = Launched.from_env(environ)
    if launched is not None:
        return launched
    job = JobEnv.from_environ(environ, os.uname().nodename)
    from ctrain.launch.gpus import visible_gpus

    options = LaunchOptions.from_settings(resolve({}, environ, Path.cwd()))
    keras3 = script_imports_keras([script] if script else [])
    gpus = visible_gpus(job, environ)
    plan = make_plan(job, options, environ, gpus, keras3, process=this_process())
    for name in plan.env_unset:
        environ.pop(name, None)
    environ.update(plan.env_set)
    placed = Launched.from_env(environ)
    assert placed is not None
    return placed


@dataclass
class Context:
    """This process's part in the training: mode, ranks, strategy and chief-only duties."""

    placement: Launched
    strategy: Any  # tf.distribute.Strategy, or None under Horovod
    hvd: Any = None  # horovod.tensorflow.keras under Horovod
    keras3: bool = False  # the script runs on Keras 3, not tf-keras (TF_USE_LEGACY_KERAS)
    _preemption: dict[str, Any] = field(default_factory=dict)

    @property
    def mode(self) -> Mode:
        return self.placement.mode

    @property
    def rank(self) -> int:
        return self.placement.rank

    @property
    def size(self) -> int:
        return self.placement.size

    @property
    def local_rank(self) -> int:
        return self.placement.local_rank

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def verbose(self) -> int:
        """Keras ``verbose`` for fit/evaluate: progress on the chief only."""
        return 1 if self.is_chief else 0

    @property
    def replicas(self) -> int:
        """Model replicas taking part in one step, over all processes."""
        if self.strategy is None:
            return self.size
        return int(self.strategy.num_replicas_in_sync)

    def scale_lr(self, lr: float) -> float:
        """The learning rate scaled linearly with the number of replicas."""
        return lr * self.replicas

    def global_batch(self, per_replica: int) -> int:
        """Examples in one step over all replicas."""
        return per_replica * self.replicas

    def batch_size(self, per_replica: int) -> int:
        """What to give ``dataset.batch`` in this process: TF strategies split a global batch,
        Horovod ranks each batch their own."""
        return per_replica if self.strategy is None else self.global_batch(per_replica)

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        """Create the model and optimizer inside this."""
        return contextlib.nullcontext() if self.strategy is None else self.strategy.scope()

    def optimizer(self, opt: Any) -> Any:
        """Under Horovod, ``opt`` averaging gradients over the ranks (Horovod's
        DistributedOptimizer for tf-keras, ctrain's for Keras 3); ``opt`` itself otherwise."""
        if self.hvd is None:
            return opt
        from ctrain.train import keras3_horovod

        if keras3_horovod.is_keras3_optimizer(opt):
            return keras3_horovod.distributed_optimizer(opt)
        return self.hvd.DistributedOptimizer(opt)

    def shard(self, dataset: Any) -> Any:
        """Each process's share of ``dataset``; call it before shuffling and batching.

        Horovod: an explicit shard by rank. Multiworker: TensorFlow's own element-wise
        sharding (every worker runs the pipeline and keeps its part of each global batch, so
        shuffle with the same seed on every rank). One process: the whole dataset.
        """
        import tensorflow as tf

        if self.mode is Mode.MULTIWORKER:
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = (
                tf.data.experimental.AutoShardPolicy.DATA
            )
            return dataset.with_options(options)
        if self.size > 1:
            return dataset.shard(self.size, self.rank)
        return dataset

    def callbacks(self, warmup_epochs: float = 0.0, verbose: bool = False) -> list[Any]:
        """Broadcast of initial weights and metric averaging under Horovod, a learning-rate
        warm-up from lr/replicas to lr over ``warmup_epochs``, and the stall watchdog (a rank
        with no step for CTRAIN_STALL_TIMEOUT seconds in ``fit`` ends itself: train/watchdog.py).
        """
        from ctrain.train import callbacks

        chosen: list[Any] = []
        if self.hvd is not None:
            if self.keras3:
                from ctrain.train.keras3_callbacks import BroadcastInitialWeights

                chosen.append(BroadcastInitialWeights(self.hvd))
            else:
                chosen.append(callbacks.BroadcastInitialWeights(self.hvd))
            chosen.append(callbacks.AverageMetrics(self.hvd))
        if warmup_epochs > 0 and self.replicas > 1:
            chosen.append(callbacks.WarmUp(warmup_epochs, self.replicas, verbose and self.is_chief))
        timeout = resolve({}, os.environ, Path.cwd()).stall_timeout
        if timeout > 0:
            chosen.insert(0, callbacks.WatchProgress(timeout))
        return chosen

    def checkpoint_dir(self, path: str | os.PathLike[str]) -> Path:
        """``path`` on the chief; a private temporary directory, removed at exit, elsewhere
        (MultiWorkerMirroredStrategy needs every worker to write)."""
        if self.is_chief:
            Path(path).mkdir(parents=True, exist_ok=True)
            return Path(path)
        scratch = tempfile.mkdtemp(prefix=f"ctrain-rank{self.rank}-")
        atexit.register(shutil.rmtree, scratch, True)
        return Path(scratch)

    def resume(
        self,
        model: Any,
        path: str | os.PathLike[str],
        config: Mapping[str, Any] | None = None,
        restore_lr: bool = False,
    ) -> int:
        """Load the latest complete checkpoint under ``path`` (every rank reads it: a shared
        file system) and return the epoch to give ``fit(initial_epoch=...)``; 0 when there is
        none. Call it after ``model.compile`` and before ``fit``; give the same ``config`` (the
        settings that make a checkpoint fit this run) as to ``preemption_callbacks``.

        A checkpoint of another architecture or ``config`` is refused (CheckpointError). A run
        stopped mid-epoch resumes at the same step: the first steps of that epoch read and drop
        their batches, so keep each epoch's data order the same across restarts (no reshuffle,
        or ``shuffle(..., seed=S, reshuffle_each_iteration=False)``). The learning rate stays the
        one the script set (warm-up and schedules recompute it) unless ``restore_lr``.
        Also installs the SIGUSR2 and SIGTERM handler, so a signal from now on is not fatal.
        """
        from ctrain.train import preemption

        epoch, step, resumed_from = preemption.resume(self, model, path, config, restore_lr)
        self._preemption["resumed"] = (epoch, step)
        self._preemption["from"] = resumed_from
        return epoch

    def preemption_callbacks(
        self,
        path: str | os.PathLike[str],
        config: Mapping[str, Any] | None = None,
        every_epochs: int = 1,
        keep: int = 2,
        exit: bool = True,
        check_every: int = 1,
    ) -> list[Any]:
        """A callback that checkpoints to ``path`` (atomically, the chief; see ``resume``) every
        ``every_epochs`` epochs and, when SIGUSR2 or SIGTERM arrives on any rank, after the
        current step on all ranks, then exits with ``REQUEUE_EXIT_CODE`` so the job script
        requeues the job (after SIGTERM within CTRAIN_STOP_BUDGET seconds, or without a
        checkpoint).
        Put it last in ``fit``'s callbacks. ``keep`` checkpoints are kept; ``check_every``
        steps the ranks agree whether to stop (one small allreduce)."""
        from ctrain.train import preemption

        policy = preemption.Policy(every_epochs, keep, exit, check_every)
        callback = preemption.Preemption(self, path, config, policy)
        self._preemption["callback"] = callback
        return [callback]

    @property
    def preempted(self) -> bool:
        """Training stopped on the signal (with ``exit=False``: exit with REQUEUE_EXIT_CODE)."""
        callback = self._preemption.get("callback")
        return bool(callback is not None and callback.stopped)

    def profile(
        self,
        steps: str,
        ranks: str = AUTO_RANKS,
        directory: str | os.PathLike[str] = DEFAULT_PROFILE_DIR,
    ) -> None:
        """Trace training steps ``steps`` (``FIRST-LAST``, as ``--profile``) from the script;
        ``ranks`` trace (auto: the chief and the last rank), into one directory per run under
        ``directory``. Call it before training. ``--profile`` (or CTRAIN_PROFILE) set for the
        launch is replaced. Horovod's timeline needs the launch's setting instead (Horovod
        reads HOROVOD_TIMELINE=DYNAMIC when it starts)."""
        try:
            window = parse_window(steps)
            check_ranks(ranks)
        except ValueError as exc:
            raise ConfigError(
                f"ctx.profile({steps!r}, {ranks!r}): {exc}", "correct the call"
            ) from exc
        hooks = step_hooks.armed()
        if hooks is not None:
            if hooks.profiler.started is not None or hooks.profiler.done:
                raise ConfigError(
                    f"ctx.profile({steps!r}) after the traced window began",
                    "call it before training",
                )
            hooks.profiler.window = window
            return
        decided = profiled(
            window,
            ranks,
            str(directory),
            self.mode,
            self.rank,
            self.size,
            os.environ,
            this_process(),
        )
        run = Path(decided.run)
        profiler = profiling.Profiler(window, run, self.rank, self.size, decided.trace, self.mode)
        step_hooks.arm(profiler)

    def load_dataset(
        self, name: str, split: str, data_dir: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> Any:
        """A TensorFlow Datasets split from the local data directory (``ctrain data fetch`` /
        ``ctrain data import`` put it there), never from the network. Shard it with ``shard``."""
        from ctrain.train.data import load

        return load(name, split, data_dir, **kwargs)


def _tf_strategy(placed: Launched) -> Any:
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        with contextlib.suppress(RuntimeError):
            tf.config.experimental.set_memory_growth(gpu, True)
    if placed.mode is Mode.SINGLE:
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    if placed.mode is Mode.MIRRORED:
        if placed.collective == "nccl" and gpus:
            return tf.distribute.MirroredStrategy(cross_device_ops=tf.distribute.NcclAllReduce())
        return tf.distribute.MirroredStrategy(
            cross_device_ops=tf.distribute.HierarchicalCopyAllReduce()
            if gpus
            else tf.distribute.ReductionToOneDevice()
        )
    implementation = {
        "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL,
        "ring": tf.distribute.experimental.CommunicationImplementation.RING,
    }.get(placed.collective, tf.distribute.experimental.CommunicationImplementation.AUTO)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=implementation, timeout_seconds=placed.collective_timeout
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    # TensorFlow's coordination service has just installed a SIGTERM handler that only records
    # the signal: a script would train on until SIGKILL. SIGTERM ends it again, unless ctrain's
    # stop handler (ctx.resume, ctx.preemption_callbacks) takes it.
    stopping.default_sigterm()
    return strategy


def _horovod(placed: Launched, environ: Mapping[str, str]) -> Any:
    try:
        import horovod.tensorflow.keras as hvd
    except ImportError as exc:
        raise LaunchError(
            f"Horovod mode but horovod.tensorflow.keras cannot be imported ({exc})",
            "use an image with Horovod, or `make install` (builds it against TensorFlow)",
        ) from exc
    gloo = "HOROVOD_GLOO_RENDEZVOUS_ADDR" in environ or environ.get("HOROVOD_CONTROLLER") == "gloo"
    if not (hvd.gloo_built() if gloo else hvd.mpi_built()):
        controller = "Gloo" if gloo else "MPI"
        raise LaunchError(
            f"Horovod was built without the {controller} controller this launch needs",
            f"rebuild Horovod with HOROVOD_WITH_{controller.upper()}=1",
        )
    hvd.init()
    if (hvd.rank(), hvd.size()) != (placed.rank, placed.size):
        raise LaunchError(
            f"Horovod says rank {hvd.rank()} of {hvd.size()}, the launch said "
            f"{placed.rank} of {placed.size}",
            "start Horovod ranks with srun --mpi=pmix, mpirun or horovodrun, not plain srun",
        )
    return hvd


def init(environ: MutableMapping[str, str] | None = None) -> Context:
    """Set up this process for its mode and return its training context."""
    env = os.environ if environ is None else environ
    placed = prepare_environ(env, sys.argv[0])
    step_hooks.arm_from(env)  # --profile for a script started without ctrain launch's hook
    peerwatch.WATCH.arm_from(env, stopping.end_process)  # the same; armed once
    keras3 = not tf_keras_chosen(env.get(LEGACY_KERAS))
    if placed.mode is Mode.MULTIWORKER and keras3:
        from ctrain.train import keras3_mwms

        keras3_mwms.arm()
    if placed.mode is Mode.HOROVOD:
        return Context(placed, strategy=None, hvd=_horovod(placed, env), keras3=keras3)
    return Context(placed, strategy=_tf_strategy(placed), keras3=keras3)
