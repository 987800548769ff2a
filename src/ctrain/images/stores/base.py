"""An image store: where ``ctrain pull`` puts an image for one runtime, and the pull steps,
written once.

Every store plans a pull (``PullPlan``: the reference as its tool takes it, the target, the
record and the lock), says whether its record shows the image there (``recorded``: no lock, no
network), names the variables its tool gets (``pull_env``) and pulls. The stores that write
a file or directory into ctrain's cache (a SIF, an enroot squashfs, a Charliecloud image
directory) pull through ``FileStore.pull``, the same steps for each:

1. decide before anything is written: a refusal (a file that is not ctrain's) leaves no lock;
2. under ``flock(<target>.lock)``, with SIGTERM/SIGHUP/SIGINT raised as errors: a concurrent
   pull of the same target waits, then finds it recorded;
3. remove what an interrupted pull left (``.<name>.pull-*``);
4. decide again: reuse a recorded target, downloading nothing;
5. check free space in the cache and in the node-local temporary space;
6. fetch into ``.<name>.pull-<token>`` beside the target while the cache is marked in use,
   check it, remove the old record, rename the new image over the target;
7. write the record, still under the lock.

A pull killed at any moment leaves the previous image and its record as they were, or no
record (pull again); never a record of another image. Each store supplies what differs: its
decision, its fetch and check, its record. Docker and podman keep images in their own store
(images.stores.engine).
"""

from __future__ import annotations

import abc
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from ctrain.errors import ConfigError, Interrupted, PullError
from ctrain.images import cachedir
from ctrain.images.record import Action, Sidecar, lock_of, sidecar_of
from ctrain.util import fs, locks, proc

if TYPE_CHECKING:
    from ctrain.util.progress import Event

PULL_TIMEOUT = None  # a large image on a slow link takes as long as it takes
INSPECT_TIMEOUT = 300.0
TEMP_TAG = "pull"  # temporary files are .<name>.pull-<token>
UNTOUCHED = "the previous image is untouched"

Say = Callable[[str], None]
Show = Callable[["Event"], None]


@dataclass(frozen=True, kw_only=True)
class PullPlan:
    ref: str  # as the store's tool takes it
    runtime: str
    program: str
    target: Path | None  # the file or directory; None for docker/podman (the engine's store)
    record: Path  # the sidecar
    lock: Path
    owned: bool  # the target is in ctrain's cache
    force: bool
    stamp: str | None = None  # the source archive's (sif.archive_stamp), for archive schemes

    @classmethod
    def beside(
        cls,
        asked: PullAsk,
        ref: str,
        target: Path,
        *,
        runtime: str | None = None,
        program: str | None = None,
        owned: bool = True,
        stamp: str | None = None,
    ) -> PullPlan:
        """A plan whose target is a file or directory, with its record and lock beside it."""
        return cls(
            ref=ref,
            runtime=runtime or asked.runtime,
            program=program or asked.program,
            target=target,
            record=sidecar_of(target),
            lock=lock_of(target),
            owned=owned,
            force=asked.force,
            stamp=stamp,
        )


@dataclass(frozen=True)
class PullResult:
    where: str  # the file or directory, or the engine reference
    downloaded: bool
    sidecar: Sidecar
    reason: str


@dataclass(frozen=True, kw_only=True)
class PullAsk:
    """What ``ctrain pull`` (or an exec that needs a pull) asks a store to plan."""

    ref: str
    runtime: str
    program: str
    cache_root: Path
    output: str | None = None  # -o: a file or directory, where the store takes one
    force: bool = False
    is_dir: Callable[[Path], bool] = Path.is_dir


@dataclass(frozen=True)
class Pulling:
    """What a pull runs with: the cache, the environment, the free space it needs, where it
    says what it does (``say``), docker's layer progress (``show``) and the tool's own output
    lines (``echo``); ``tmpdir``: the tool's temporary space (default
    ``cachedir.node_local_tmp``)."""

    cache: cachedir.CacheChoice
    environ: Mapping[str, str]
    min_free_gb: int
    say: Say
    tmpdir: Path | None = None
    show: Show = lambda event: None
    echo: Say = lambda line: None


class Store(Protocol):
    def plan(self, asked: PullAsk) -> PullPlan: ...

    def recorded(self, plan: PullPlan) -> bool:
        """Whether ctrain's record says the image is there (no lock, no network)."""
        ...

    def pull_env(self, plan: PullPlan, cache: cachedir.CacheChoice, tmpdir: Path) -> dict[str, str]:
        """What ctrain adds to the pull tool's environment."""
        ...

    def pull(self, plan: PullPlan, run: Pulling) -> PullResult: ...


@contextlib.contextmanager
def signals_as_errors() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP/SIGINT into Interrupted, so the child is killed and the temporary
    file removed by the ``finally`` blocks (subprocess.run kills its child on any exception)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(
            f"pull stopped by {signal.Signals(signum).name}; {UNTOUCHED}",
            "run the same ctrain pull again",
        )

    wanted = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {sig: signal.signal(sig, handler) for sig in wanted}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def pull_lock(plan: PullPlan, where: str, environ: Mapping[str, str], say: Say) -> Iterator[None]:
    """Hold ``plan``'s lock for the pull of ``where`` (another pull of it: say whose, then
    wait), with SIGTERM/SIGHUP/SIGINT raised as errors so the temporary files go."""
    holder = locks.describe_holder("ctrain pull", environ)

    def waiting(who: str) -> None:
        say(f"waiting for another pull of {where} ({who})")

    with signals_as_errors(), locks.hold_lock(plan.lock, holder, waiting):
        yield


def run_tool(argv: list[str], env: Mapping[str, str], what: str, fix: str, echo: Say) -> None:
    """Run a pull tool, its output lines to ``echo``: a signal passed on to it ends the pull as
    Interrupted, a failure as PullError with the last of what it said."""
    again = "run the same ctrain pull again"
    code, tail = proc.stream_to_end(argv, env, echo, what="pull", untouched=UNTOUCHED, again=again)
    if code != 0:
        last = proc.last_line(tail) or f"exit code {code}"
        raise PullError(f"{what} failed: {last}", f"{fix}; {UNTOUCHED}")


class FileStore(abc.ABC):
    """A store whose images are files or directories in ctrain's cache; ``pull`` runs the
    steps of the module's doc, the subclass supplies what differs."""

    space_fix = "free some space in the cache, or choose another --cache-dir"
    flush = True  # flush the fetched image to disk before the rename (fs.atomic)

    @abc.abstractmethod
    def decision(self, plan: PullPlan, target: Path) -> tuple[Sidecar | None, Action, str]:
        """(the record, reuse/pull/refuse, why) for ``target``; no lock, no network."""

    @abc.abstractmethod
    def fetch(self, plan: PullPlan, temp: Path, run: Pulling, temp_space: Path) -> int | None:
        """Write the image at ``temp`` (absent before) and check it; its size, if a file."""

    @abc.abstractmethod
    def record(self, plan: PullPlan, target: Path, size: int | None) -> Sidecar:
        """The record of the image just renamed to ``target``."""

    @abc.abstractmethod
    def starting(self, plan: PullPlan, target: Path, reason: str) -> str:
        """The line said before the fetch."""

    def swept(self, target: Path, temp_space: Path) -> tuple[Path, ...]:
        """The directories where an interrupted pull's ``.<name>.pull-*`` can be."""
        return (target.parent,)

    def recorded(self, plan: PullPlan) -> bool:
        return plan.target is not None and self.decision(plan, plan.target)[1] == "reuse"

    def pull(self, plan: PullPlan, run: Pulling) -> PullResult:
        """Pull ``plan``, or reuse its recorded target."""
        target = plan.target
        if target is None:
            raise ConfigError(f"no target planned for {plan.ref}", "plan the pull with its store")
        # A refusal writes nothing, not even the lock file.
        self._decision_unless_refused(plan, target)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with pull_lock(plan, str(target), run.environ, run.say):
            temp_space = run.tmpdir or cachedir.node_local_tmp(run.environ)
            prefix = fs.temp_prefix(target, TEMP_TAG)
            for directory in self.swept(target, temp_space):
                for leftover in fs.remove_leftovers(directory, prefix):
                    run.say(f"removed {leftover}, left by an interrupted pull")
            sidecar, action, reason = self._decision_unless_refused(plan, target)
            if action == "reuse" and sidecar is not None:
                return PullResult(str(target), False, sidecar, reason)
            fs.check_free(target.parent, run.min_free_gb)
            cachedir.check_tmpdir(temp_space, run.min_free_gb)
            run.say(self.starting(plan, target, reason))
            try:
                with (
                    cachedir.in_use(run.cache),
                    fs.atomic(target, fs.temp_beside(target, TEMP_TAG), flush=self.flush) as temp,
                ):
                    size = self.fetch(plan, temp, run, temp_space)
                    # The old record out first: a crash between the steps leaves no record
                    # (pull again), never a record that describes another image.
                    plan.record.unlink(missing_ok=True)
                new = self.record(plan, target, size)
                fs.write_text(plan.record, new.to_json())  # under the lock: a waiter finds it
            except OSError as exc:
                raise fs.write_error(exc, target, self.space_fix) from exc
        return PullResult(str(target), True, new, reason)

    def _decision_unless_refused(
        self, plan: PullPlan, target: Path
    ) -> tuple[Sidecar | None, Action, str]:
        """The store's decision for ``target`` (reuse or pull); a refusal raises instead."""
        sidecar, action, reason = self.decision(plan, target)
        if action == "refuse":
            raise ConfigError(
                f"{target} {reason}", "pass --force to replace it, or choose another -o"
            )
        return sidecar, action, reason
