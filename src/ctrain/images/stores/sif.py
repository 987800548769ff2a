"""The SIF store (apptainer, singularity): ``CACHE/images/<name>.sif``, or the file ``-o`` names.

A pull runs ``<runtime> pull --disable-cache`` into the temporary name (stored once, not also in
Apptainer's cache), checks the SIF header and ``<runtime> inspect``, and is renamed over the target
by the steps of images.stores.base. Apptainer's own temporary space is a scratch directory in the
node-local one (``cachedir.build_tmpdir``); SIGTERM/SIGINT/SIGHUP are passed to it and ctrain waits
while it removes its ``build-temp-*`` (``proc.stream_forwarding``). Whether a target is reused,
pulled again or refused (a file ``-o`` names that ctrain did not pull), and its record, are
``images.record``'s; the header check is ``images.sif_header``'s. An archive (``docker-archive:``,
``oci-archive:``) is pulled again when its stamp changes; one no longer there keeps its recorded
pull, and a new pull of it is refused.
"""

from __future__ import annotations

import os
from pathlib import Path

from ctrain.errors import ConfigError, ExternalToolError
from ctrain.images import cachedir
from ctrain.images.record import (
    IMAGES_DIR,
    Action,
    Sidecar,
    TargetState,
    archive_ref,
    decide_reuse,
    new_sidecar,
    read_sidecar,
)
from ctrain.images.sif_header import check_sif
from ctrain.images.stores.base import (
    INSPECT_TIMEOUT,
    UNTOUCHED,
    FileStore,
    PullAsk,
    Pulling,
    PullPlan,
    run_tool,
)
from ctrain.references import (
    archive_path,
    check_ref,
    digest_in_ref,
    image_filename,
    loopback_registry,
)
from ctrain.util import fs, proc


def sif_state(target: Path) -> TargetState:
    """What is at ``target`` now: nothing, or a file and what is wrong with it as a SIF."""
    try:
        size = target.stat().st_size
    except FileNotFoundError:
        return TargetState(False)
    if not target.is_file():
        raise ConfigError(f"{target} exists and is not a file", "choose another -o")
    return TargetState(True, size, check_sif(target))


def sif_pull_argv(program: str, temp: Path, ref: str, force: bool) -> list[str]:
    """Straight into ``temp``, not through Apptainer's cache: the image is stored once; a
    registry on the loopback interface over plain HTTP (``references.loopback_registry``)."""
    flags = ["--disable-cache", *(["--force"] if force else [])]
    if loopback_registry(ref):
        flags.append("--no-https")
    return [program, "pull", *flags, str(temp), ref]


def sif_inspect_argv(program: str, path: Path) -> list[str]:
    return [program, "inspect", str(path)]


def sif_pull_env(cache: cachedir.CacheChoice, tmpdir: Path) -> dict[str, str]:
    """What ctrain adds to a SIF pull's environment: Apptainer's cache and temporary space."""
    return {**cachedir.apptainer_env(cache), **cachedir.tmpdir_env(tmpdir)}


class SifStore(FileStore):
    space_fix = "free some space, or pull elsewhere with -o"

    def plan(self, asked: PullAsk) -> PullPlan:
        checked, stamp = archive_ref(check_ref(asked.ref, asked.runtime))
        output, is_dir = asked.output, asked.is_dir
        if output is None:
            target = asked.cache_root / IMAGES_DIR / image_filename(checked)
        else:
            if not output.strip() or "\n" in output:
                raise ConfigError(f"-o {output!r} is not a usable path", "give a file or directory")
            given = Path(output).expanduser().absolute()
            target = given / image_filename(checked) if is_dir(given) else given
            if output.endswith(os.sep) and not is_dir(given):
                raise ConfigError(
                    f"directory {given} does not exist", f"create it (mkdir -p {given}) or fix -o"
                )
            if not is_dir(target.parent):
                raise ConfigError(
                    f"directory {target.parent} does not exist",
                    f"create it (mkdir -p {target.parent}) or choose another -o",
                )
        return PullPlan.beside(asked, checked, target, owned=output is None, stamp=stamp)

    def pull_env(self, plan: PullPlan, cache: cachedir.CacheChoice, tmpdir: Path) -> dict[str, str]:
        return sif_pull_env(cache, tmpdir)

    def decision(self, plan: PullPlan, target: Path) -> tuple[Sidecar | None, Action, str]:
        sidecar = read_sidecar(plan.record)
        state = sif_state(target)
        action, reason = decide_reuse(sidecar, plan.ref, state, plan.owned, plan.force, plan.stamp)
        archive = archive_path(plan.ref)
        if action == "pull" and archive is not None and not archive.is_file():
            raise ConfigError(
                f"no archive at {archive} to pull",
                "give the archive's path (docker save -o FILE.tar IMAGE writes one)",
            )
        return sidecar, action, reason

    def starting(self, plan: PullPlan, target: Path, reason: str) -> str:
        return f"pulling {plan.ref} into {target} with {plan.runtime} ({reason})"

    def fetch(self, plan: PullPlan, temp: Path, run: Pulling, temp_space: Path) -> int:
        """Pull into ``temp`` (its output to ``run.echo``) and check the result; its size."""
        with fs.scratch(temp_space, cachedir.TOOL_TMP_PREFIX) as scratch:
            env = {**run.environ, **sif_pull_env(run.cache, scratch)}
            run_tool(
                sif_pull_argv(plan.program, temp, plan.ref, plan.force),
                env,
                f"{plan.runtime} pull {plan.ref}",
                "check the reference, the network and the registry login (on a node without the "
                f"network, a compute node say: pull it once on a login node, ctrain pull "
                f"{plan.ref}, into the same cache, and run again)",
                run.echo,
            )
            problem = check_sif(temp)
            if problem:
                raise ExternalToolError(
                    f"{plan.runtime} pull wrote no valid SIF image for {plan.ref}: {problem}",
                    f"run the pull again; if it keeps failing, run `{plan.runtime} pull` by hand",
                )
            proc.check(
                sif_inspect_argv(plan.program, temp),
                env,
                INSPECT_TIMEOUT,
                what=f"{plan.runtime} inspect of the pulled image",
                fix=f"run the pull again; {UNTOUCHED}",
            )
        return temp.stat().st_size

    def record(self, plan: PullPlan, target: Path, size: int | None) -> Sidecar:
        return new_sidecar(
            plan.ref,
            plan.runtime,
            digest_in_ref(plan.ref),
            size=size,
            target=str(target.absolute()),
            source_stamp=plan.stamp,
        )
