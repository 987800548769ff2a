"""Checkpoints that survive a kill at any moment, and know which model wrote them.

A checkpoint is a directory ``ckpt-e<EPOCH>-s<STEP>/`` holding the training state (written by a
callable, TensorFlow's ``tf.train.Checkpoint`` in practice) and ``manifest.json``. It is written
under a temporary name in the same directory, every file flushed to disk, then renamed: the
rename is atomic, so a reader sees a whole checkpoint or none, and the previous one stays valid
until the new one is whole. A process killed mid-write leaves a ``.tmp-ckpt-*`` directory that
no lookup reads and the next write removes.

``EPOCH`` counts the epochs completed; ``STEP`` the steps done in the next one (0 at an epoch
boundary, more when training stopped mid-epoch on a signal). The manifest carries a fingerprint
of the model's architecture and of the training configuration: a checkpoint from another model
or configuration is refused, never loaded silently.

No TensorFlow here: the state writer and the model description are given by the caller.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctrain import __version__
from ctrain.errors import REQUEUE_EXIT_CODE as REQUEUE_EXIT_CODE
from ctrain.errors import CheckpointError
from ctrain.names import ENV_LAUNCH_MODE, ENV_WORLD_SIZE
from ctrain.util import fs

MANIFEST = "manifest.json"
STATE = "state"  # the state writer's file prefix inside a checkpoint directory
TMP_PREFIX = ".tmp-ckpt-"
_NAME = re.compile(r"^ckpt-e(\d{6,})-s(\d{9,})$")


@dataclass(frozen=True)
class Fingerprint:
    """Hashes of the model's architecture and of the training configuration."""

    architecture: str
    config: str

    def differences(self, other: Fingerprint) -> list[str]:
        return [
            name
            for name in ("architecture", "config")
            if getattr(self, name) != getattr(other, name)
        ]


@dataclass(frozen=True)
class Manifest:
    epoch: int
    step: int
    fingerprint: Fingerprint
    files: dict[str, int]  # file name -> size in bytes
    created: float
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        raw = json.loads(text)
        return cls(
            epoch=int(raw["epoch"]),
            step=int(raw["step"]),
            fingerprint=Fingerprint(**raw["fingerprint"]),
            files={str(k): int(v) for k, v in raw["files"].items()},
            created=float(raw["created"]),
            info=dict(raw.get("info", {})),
        )


@dataclass(frozen=True)
class Found:
    """A complete checkpoint: its directory, manifest, and the state prefix to read."""

    path: Path
    manifest: Manifest

    @property
    def state(self) -> Path:
        return self.path / STATE


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _without_names(value: Any) -> Any:
    """A layer or model config without its auto-generated names (``dense_3``), which depend on
    how many layers the process made before, not on the architecture."""
    if isinstance(value, Mapping):
        return {k: _without_names(v) for k, v in value.items() if k != "name"}
    if isinstance(value, (list, tuple)):
        return [_without_names(v) for v in value]
    return value


def fingerprint(architecture: Any, config: Mapping[str, Any] | None = None) -> Fingerprint:
    """Hash a JSON-able architecture description and a training configuration."""
    arch = hashlib.sha256(_canonical(_without_names(architecture)).encode()).hexdigest()
    conf = hashlib.sha256(_canonical(dict(config or {})).encode()).hexdigest()
    return Fingerprint(arch, conf)


# Optimizer settings that do not change what a checkpoint means: the rate is scaled with the
# number of replicas and driven by warm-up and schedules; the others follow the device.
_OPTIMIZER_IGNORED = {"name", "learning_rate", "jit_compile", "is_legacy_optimizer"}


def describe_model(model: Any) -> dict[str, Any]:
    """What makes a Keras model's checkpoint loadable into it: its layers' configs, the shapes
    and dtypes of its weights, and its optimizer's kind and settings."""
    try:
        config: Any = model.get_config()
    except (NotImplementedError, AttributeError, TypeError):
        config = None
    description: dict[str, Any] = {
        "class": type(model).__name__,
        "config": config,
        "weights": [[list(w.shape), str(w.dtype.name)] for w in model.weights],
    }
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        try:
            opt_config = dict(optimizer.get_config())
        except (NotImplementedError, AttributeError, TypeError):
            opt_config = {}
        description["optimizer"] = {
            "class": type(optimizer).__name__,
            "config": {k: v for k, v in opt_config.items() if k not in _OPTIMIZER_IGNORED},
        }
    return description


def checkpoint_name(epoch: int, step: int) -> str:
    return f"ckpt-e{epoch:06d}-s{step:09d}"


def _files(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}


def inspect(path: Path) -> Manifest | str:
    """The manifest of checkpoint directory ``path`` when the checkpoint is whole, else why not."""
    try:
        manifest = Manifest.from_json((path / MANIFEST).read_text(encoding="utf-8"))
    except OSError as exc:
        return f"its {MANIFEST} cannot be read ({exc.strerror or exc})"
    except (ValueError, KeyError, TypeError):
        return f"its {MANIFEST} is damaged"
    for name, size in manifest.files.items():
        try:
            actual = (path / name).stat().st_size
        except OSError:
            return f"its file {name} is missing"
        if actual != size:
            return f"its file {name} has {actual} bytes where {MANIFEST} says {size}"
    return manifest


@dataclass(frozen=True)
class Scan:
    """A checkpoint directory's checkpoints: the whole ones, oldest first (by epoch, then step),
    and those that are not, by name, each with why."""

    whole: list[Found]
    broken: list[tuple[Path, str]]


def scan(directory: str | os.PathLike[str]) -> Scan:
    """The checkpoints in ``directory``, whole and not (``.tmp-ckpt-*`` are neither)."""
    base = Path(directory)
    if not base.is_dir():
        return Scan([], [])
    whole, broken = [], []
    for path in sorted(base.iterdir()):
        if not _NAME.match(path.name) or not path.is_dir():
            continue
        found = inspect(path)
        if isinstance(found, Manifest):
            whole.append(Found(path, found))
        else:
            broken.append((path, found))
    whole.sort(key=lambda f: (f.manifest.epoch, f.manifest.step))
    return Scan(whole, broken)


def complete(directory: str | os.PathLike[str]) -> list[Found]:
    """The complete checkpoints in ``directory``, oldest first (by epoch, then step)."""
    return scan(directory).whole


def latest(directory: str | os.PathLike[str]) -> Found | None:
    """The latest complete checkpoint in ``directory``, or None."""
    checkpoints = complete(directory)
    return checkpoints[-1] if checkpoints else None


def passed_over(path: Path, why: str, used: Path) -> str:
    """The warning for a checkpoint passed over on resume, and the one used instead."""
    return f"ctrain: warning: checkpoint {path} is unreadable: {why}; resuming from {used}"


def none_loadable(directory: Path, passed: list[tuple[Path, str]]) -> CheckpointError:
    """The error when no checkpoint in ``directory`` can be loaded, each passed over with why."""
    said = "; ".join(f"{path.name}: {why}" for path, why in passed)
    return CheckpointError(
        f"no checkpoint in {directory} can be loaded ({said})",
        f"move {directory} aside to start over, or put back a readable checkpoint",
    )


def unwritten(directory: Path, epoch: int, step: int, why: str) -> CheckpointError:
    """The error when the checkpoint at (``epoch``, ``step``) could not be written: where, why,
    the free space there, and the checkpoint that is still intact (none: the run starts over)."""
    previous = latest(directory)
    kept = f"{previous.path} is intact" if previous else "no earlier checkpoint is there"
    again = f"resumes from {previous.path.name}" if previous else "starts from the beginning"
    return CheckpointError(
        f"checkpoint {checkpoint_name(epoch, step)} could not be written in {directory}: {why} "
        f"({fs.human(fs.free_bytes(directory))} free there); {kept}",
        f"free space in {directory} or make it writable (or give the checkpoints another "
        f"directory), then run again: it {again}",
    )


def check(found: Found, expected: Fingerprint) -> None:
    """Refuse a checkpoint written for another model or configuration."""
    differs = found.manifest.fingerprint.differences(expected)
    if not differs:
        return
    what = " and ".join(
        {"architecture": "model architecture", "config": "training configuration"}[d]
        for d in differs
    )
    raise CheckpointError(
        f"checkpoint {found.path} was written by a different {what}; refusing to load it",
        f"resume with the model and configuration that wrote it, or start this run in another "
        f"checkpoint directory (or move {found.path.parent} aside)",
    )


def write(
    directory: str | os.PathLike[str],
    epoch: int,
    step: int,
    fp: Fingerprint,
    write_state: Callable[[Path], None],
    info: Mapping[str, Any] | None = None,
    keep: int = 2,
) -> Path:
    """Write a checkpoint atomically and return its directory.

    ``write_state(prefix)`` writes the training state to files named ``prefix*``. The manifest
    is written last, every file flushed, then the temporary directory renamed into place
    (``util.fs.atomic``) and older checkpoints beyond the newest ``keep`` removed.
    """
    if keep < 1:
        raise CheckpointError(f"keep={keep} would delete every checkpoint", "keep at least 1")
    base = Path(directory)
    base.mkdir(parents=True, exist_ok=True)
    fs.remove_leftovers(base, TMP_PREFIX)
    final = base / checkpoint_name(epoch, step)
    with fs.atomic(final, Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=base))) as tmp:
        write_state(tmp / STATE)
        manifest = Manifest(epoch, step, fp, _files(tmp), time.time(), dict(info or {}))
        (tmp / MANIFEST).write_text(manifest.to_json(), encoding="utf-8")
        if final.exists():  # the same position written again: move the old one aside first
            aside = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=base))
            os.rename(final, aside / final.name)
    fs.remove_leftovers(base, TMP_PREFIX)
    for old in complete(base)[:-keep]:
        shutil.rmtree(old.path, ignore_errors=True)
    return final


def job_info(environ: Mapping[str, str]) -> dict[str, Any]:
    """What the manifest records about the run that wrote it (for people, not for loading)."""
    keys = ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", ENV_LAUNCH_MODE, ENV_WORLD_SIZE)
    return {"ctrain": __version__, **{k: environ[k] for k in keys if k in environ}}
