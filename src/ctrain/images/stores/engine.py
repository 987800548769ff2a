"""The engine store (``ctrain pull --runtime docker|podman``): the image goes to the engine's own
store, under the lock of images.stores.base (signals raised as errors): docker through its API
(``images.docker_api``, the layers' progress to the caller), podman through its CLI (``podman
pull``, ``podman image inspect``). ctrain keeps a sidecar record in ``CACHE/docker/``, and a pull
whose record names the image the engine holds downloads nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from ctrain.errors import ConfigError, ExternalToolError, PullError
from ctrain.images import cachedir
from ctrain.images.engine_image import (
    EngineImage,
    engine_inspect_argv,
    engine_pull_argv,
    parse_engine_inspect,
    pull_outcome,
    pulled_digest,
)
from ctrain.images.record import ENGINE_DIR, new_sidecar, read_sidecar
from ctrain.images.stores.base import (
    INSPECT_TIMEOUT,
    PULL_TIMEOUT,
    PullAsk,
    Pulling,
    PullPlan,
    PullResult,
    Show,
    pull_lock,
)
from ctrain.names import DOCKER
from ctrain.references import check_ref, safe_name
from ctrain.util import fs, proc


class EngineStore:
    def plan(self, asked: PullAsk) -> PullPlan:
        """No file: the engine keeps the image; the record goes to ``CACHE/docker/``."""
        checked = check_ref(asked.ref, asked.runtime)
        if asked.output is not None:
            raise ConfigError(
                f"-o/--output has no meaning for {asked.runtime}: images live in its own store",
                "drop -o, or pull a SIF file with --runtime apptainer",
            )
        named = asked.cache_root / ENGINE_DIR / safe_name(checked)  # NAME.json, NAME.lock
        return dataclasses.replace(PullPlan.beside(asked, checked, named), target=None)

    def recorded(self, plan: PullPlan) -> bool:
        """Whether ctrain's record names this reference (the engine is not asked)."""
        sidecar = read_sidecar(plan.record)
        return sidecar is not None and sidecar.ref == plan.ref

    def pull_env(self, plan: PullPlan, cache: cachedir.CacheChoice, tmpdir: Path) -> dict[str, str]:
        return {}  # the engine pulls; its client needs nothing of ctrain's

    def pull(self, plan: PullPlan, run: Pulling) -> PullResult:
        plan.record.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with pull_lock(plan, plan.ref, run.environ, run.say):
            return pull_engine(plan, run.environ, run.say, run.show)


def pull_engine(
    plan: PullPlan, environ: Mapping[str, str], say: Callable[[str], None], show: Show
) -> PullResult:
    """Pull ``plan.ref`` unless the sidecar says the engine holds it already (or --force)."""
    if plan.runtime == DOCKER:
        inspect, download = _docker(plan, environ, show)
    else:
        inspect, download = _podman(plan, environ)
    sidecar = read_sidecar(plan.record)
    present = inspect()
    if (
        not plan.force
        and sidecar is not None
        and present is not None
        and sidecar.ref == plan.ref
        and sidecar.image_id == present.id
    ):
        return PullResult(plan.ref, False, sidecar, "up to date")
    say(f"pulling {plan.ref} with {plan.runtime}")
    try:
        said = download()
    except ExternalToolError as exc:  # the registry refused it, or could not be reached
        raise PullError(exc.message, exc.fix) from exc
    image = inspect()
    if image is None:
        raise ExternalToolError(
            f"{plan.runtime} pulled {plan.ref} but `{plan.runtime} image inspect` cannot see it",
            f"run {plan.runtime} image inspect {plan.ref} by hand",
        )
    digest = pulled_digest(plan.ref, image, said)
    new = new_sidecar(plan.ref, plan.runtime, digest, image_id=image.id)
    fs.write_text(plan.record, new.to_json())
    status = pull_outcome(present, image, said)
    return PullResult(plan.ref, status != "up to date", new, f"{plan.runtime} pull: {status}")


Inspect = Callable[[], EngineImage | None]
Download = Callable[[], str]  # what the pull said (its Digest: and Status: lines)


def _docker(plan: PullPlan, environ: Mapping[str, str], show: Show) -> tuple[Inspect, Download]:
    from ctrain.images import docker_api

    client = docker_api.connect(environ)

    def inspect() -> EngineImage | None:
        return docker_api.inspect(client, plan.ref, environ)

    def download() -> str:
        return docker_api.pull(client, plan.ref, environ, show)

    return inspect, download


def _podman(plan: PullPlan, environ: Mapping[str, str]) -> tuple[Inspect, Download]:
    def inspect() -> EngineImage | None:
        done = proc.run(engine_inspect_argv(plan.program, plan.ref), environ, INSPECT_TIMEOUT)
        if done.returncode != 0:
            return None
        try:
            return parse_engine_inspect(done.stdout)
        except (ValueError, KeyError, IndexError):
            return None

    def download() -> str:
        return proc.check(
            engine_pull_argv(plan.program, plan.ref),
            environ,
            PULL_TIMEOUT,
            what=f"{plan.runtime} pull {plan.ref}",
            fix=f"check the reference, the registry and `{plan.runtime} login`",
        )

    return inspect, download
