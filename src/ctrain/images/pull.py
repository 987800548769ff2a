"""``ctrain pull``: the store of each runtime that pulls, chosen from one table, as
``container.runtimes`` chooses adapters; the pull steps themselves, and what a pull is asked
(``PullAsk``) and runs with (``Pulling``), are images.stores.base's.

- apptainer, singularity: a SIF file (images.stores.sif);
- pyxis: an enroot squashfs file (images.stores.enroot);
- charliecloud: an image directory (images.stores.charliecloud);
- docker, podman: the engine's own store (images.stores.engine).

A failed download of the `image` setting's default, which no registry may hold until a release
publishes it, ends in the one line that says so and how to build or push it (``pull``).
"""

from __future__ import annotations

from ctrain.errors import ConfigError, CtrainError, PullError
from ctrain.images.stores.base import PullAsk, Pulling, PullPlan, PullResult, Store
from ctrain.images.stores.charliecloud import CharliecloudStore
from ctrain.images.stores.engine import EngineStore
from ctrain.images.stores.enroot import EnrootStore
from ctrain.images.stores.sif import SifStore
from ctrain.names import CHARLIECLOUD, ENGINE_RUNTIMES, PYXIS, SIF_RUNTIMES
from ctrain.settings_table import BY_NAME

STORES: dict[str, Store] = {
    **{name: SifStore() for name in SIF_RUNTIMES},
    **{name: EngineStore() for name in ENGINE_RUNTIMES},
    CHARLIECLOUD: CharliecloudStore(),
    PYXIS: EnrootStore(),
}


def store_of(runtime: str) -> Store:
    """The store of ``runtime``, or a ConfigError naming every runtime that pulls."""
    store = STORES.get(runtime)
    if store is None:
        raise ConfigError(
            f"the {runtime} runtime has no images to pull",
            f"choose --runtime: one of {', '.join(STORES)}",
        )
    return store


def plan(asked: PullAsk) -> PullPlan:
    """Where a pull goes, checked before anything is written."""
    return store_of(asked.runtime).plan(asked)


def default_image() -> str:
    """The `image` setting's default: ctrain's release image."""
    return str(BY_NAME["image"].default)


def is_default(plan: PullPlan) -> bool:
    """Whether ``plan`` pulls the default image, however it was given (the reference compared
    as ``plan``'s store takes it: with or without docker://, in enroot's form; the cache root
    given does not change it)."""
    asked = PullAsk(
        ref=default_image(), runtime=plan.runtime, program=plan.program, cache_root=plan.lock.parent
    )
    try:
        return store_of(plan.runtime).plan(asked).ref == plan.ref
    except CtrainError:
        return False


def pull(plan: PullPlan, run: Pulling) -> PullResult:
    """Run the pull ``plan`` with its runtime's store; a failed download of the default image
    is the PullError that says it is not published (yet), with the tool's reason."""
    try:
        return store_of(plan.runtime).pull(plan, run)
    except PullError as exc:
        if is_default(plan):
            raise PullError.unpublished(default_image(), exc) from exc
        raise
