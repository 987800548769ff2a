"""Apptainer and SingularityCE: pure argv and environment builders.

The container starts with ``--cleanenv`` (no host PYTHONPATH, LD_LIBRARY_PATH, ...); the chosen
variables travel as ``APPTAINERENV_NAME`` (``SINGULARITYENV_`` for SingularityCE), which carries
any value, commas and newlines included, unlike ``--env A=1,B=2``. Apptainer writes each one
into a shell script it sources at start; ``--no-eval`` (Apptainer >= 1.1, SingularityCE >= 3.10)
makes it quote them so they arrive verbatim. Without it, ``$``, backticks and backslashes would
be interpreted, so such values are refused. The container starts in the host's working
directory by itself (falling back to $HOME with a warning); ``--cwd`` only when asked.

``--nv`` binds the host's NVIDIA driver libraries into ``/.singularity.d/libs``, which
Apptainer 1.4 puts first on the library path of an image that sets none, and 1.5 after the
image's default library directories (``ldconfig``'s), so a driver stub or a CUDA compat library
there would win over the host's driver. ctrain's images take CUDA from pip wheels and the driver
from the host: on 1.5 ctrain asks for the 1.4 order (``PREPEND_LD_LIBRARY_PATH``), unless the
command sets LD_LIBRARY_PATH or PREPEND_LD_LIBRARY_PATH itself.

Without root, a non-setuid Apptainer mounts a SIF with squashfuse and an ext3 overlay with
fuse2fs, both through /dev/fuse. Where /dev/fuse is closed to the caller, the SIF is extracted
to a temporary sandbox instead (``--unsquash``: a slower start, the image's size in the
temporary directory), and an overlay image is refused before launch: it cannot be mounted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Final

from ctrain.container.spec import Bind, RunSpec
from ctrain.errors import SpecError
from ctrain.references import is_remote, runtime_reference
from ctrain.releases import RuntimeVersion, needs
from ctrain.util.secrets import masked

NO_EVAL: Final = "--no-eval"
UNSQUASH: Final = "--unsquash"
PREPEND_LIBS: Final = "PREPEND_LD_LIBRARY_PATH"
DRIVER_LIBS: Final = "/.singularity.d/libs"  # where --nv binds the host's driver libraries
# What the shell interprets inside double quotes (a trailing backslash breaks the script).
_EVALUATED = ("$", "`", "\\")


def _bind(bind: Bind) -> str:
    for path in (bind.src, bind.dst):
        if ":" in path or "," in path:
            raise SpecError(
                f"bind path {path!r} holds ':' or ',', which apptainer's --bind cannot express",
                "bind a parent directory or a symlink without those characters",
            )
    return f"{bind.src}:{bind.dst}:{bind.mode}"


def without_fuse(spec: RunSpec) -> bool:
    """Whether Apptainer runs unprivileged here with /dev/fuse closed to the caller."""
    return spec.user is not None and spec.user[0] != 0 and not spec.fuse


def refuse_overlay_without_fuse(spec: RunSpec) -> None:
    if spec.overlay is not None and without_fuse(spec):
        raise SpecError(
            f"overlay {spec.overlay.path} cannot be mounted: an unprivileged apptainer mounts "
            "overlay images with fuse2fs, and /dev/fuse is closed to you here",
            "run without --overlay (install extra packages into a directory you bind with -B "
            "and put on PYTHONPATH), or ask the site to open /dev/fuse to users",
        )


def driver_first(spec: RunSpec, version: RuntimeVersion) -> dict[str, str]:
    """The container variable that keeps the host's driver libraries first under ``--nv`` on
    Apptainer >= 1.5 (the 1.4 order); nothing where the command chose its library path."""
    chosen = {"LD_LIBRARY_PATH", PREPEND_LIBS} & spec.env.keys()
    if spec.nv and version.has(PREPEND_LIBS) and not chosen:
        return {PREPEND_LIBS: DRIVER_LIBS}
    return {}


def refuse_evaluated(env: Mapping[str, str], version: RuntimeVersion) -> None:
    """Without --no-eval, a value with ``$``, a backtick or a backslash would not arrive as is."""
    for key, value in sorted(env.items()):
        if any(char in value for char in _EVALUATED):
            raise SpecError(
                f"{key}={masked(key, value)!r} would be shell-evaluated by {version.text}, which "
                f"has no {NO_EVAL} (values with $, ` or \\ do not arrive as given)",
                f"use {needs(NO_EVAL)} (module load apptainer), "
                "or pass the value in a file (--bind) instead",
            )


@dataclass(frozen=True)
class Apptainer:
    name: str = "apptainer"
    # the launcher is carried in: a read-only bind onto a path the image lacks (made for it)
    carries_launcher: ClassVar[bool] = True
    version: RuntimeVersion | None = None  # the installed release, once probed

    def probed(self, program: str, version_of: Callable[[str], RuntimeVersion]) -> Apptainer:
        return dataclasses.replace(self, version=version_of(program))

    def _installed(self) -> RuntimeVersion:
        if self.version is None:
            raise AssertionError("Apptainer.argv before probed()")  # a programming error
        return self.version

    @property
    def env_prefix(self) -> str:
        """Apptainer's compatibility ``singularity`` still reads APPTAINERENV_ (each
        SINGULARITYENV_ variable would print an INFO line per rank)."""
        if self.name == "singularity" and self._installed().flavour != "apptainer":
            return "SINGULARITYENV_"
        return "APPTAINERENV_"

    def argv(self, spec: RunSpec, program: str) -> list[str]:
        refuse_overlay_without_fuse(spec)
        argv = [program, spec.action, "--cleanenv"]
        if self._installed().has(NO_EVAL):
            argv.append(NO_EVAL)
        if without_fuse(spec):
            argv.append(UNSQUASH)
        if spec.nv:
            argv.append("--nv")
        for bind in spec.binds:
            argv += ["--bind", _bind(bind)]
        if spec.overlay is not None:
            suffix = ":ro" if spec.overlay.readonly else ""
            argv += ["--overlay", spec.overlay.path + suffix]
        if spec.workdir is not None:
            argv += ["--cwd", spec.workdir]
        argv.append(runtime_reference(spec.image, "exec"))
        return argv + list(spec.command)

    def process_env(self, spec: RunSpec, environ: Mapping[str, str]) -> dict[str, str]:
        version = self._installed()
        if not version.has(NO_EVAL):
            refuse_evaluated(spec.env, version)
        inside = {**driver_first(spec, version), **spec.env}
        env = dict(environ)
        env.update({self.env_prefix + key: value for key, value in inside.items()})
        return env

    def notes(self, spec: RunSpec) -> list[str]:
        """What --dry-run says about this runtime's choices."""
        version = self._installed()
        verbatim = f"values verbatim ({NO_EVAL})" if version.has(NO_EVAL) else "checked, no $`\\"
        lines = [f"{version.text}: container variables as {self.env_prefix}NAME, {verbatim}"]
        if without_fuse(spec):
            lines.append(
                f"/dev/fuse is closed to you: {UNSQUASH} extracts the image to a temporary "
                "sandbox at each start"
            )
        if driver_first(spec, version):
            lines.append(
                f"--nv: {PREPEND_LIBS}={DRIVER_LIBS}, so the host's NVIDIA driver libraries come "
                "before the image's own library directories (Apptainer 1.4's order)"
            )
        image = runtime_reference(spec.image, "exec")
        if image != spec.image:
            takes = f"the form {self.name} {spec.action} takes"
            lines.append(f"image {spec.image} given as {image}, {takes}")
        return lines

    def image_file(self, image: str) -> str | None:
        """The local file an image reference names, or None for a remote reference."""
        return None if is_remote(image, "exec") else image
