"""``ctrain pull``: the store of each runtime that pulls, chosen from one table, as
``container.runtimes`` chooses adapters; the pull steps themselves, and what a pull is asked
(``PullAsk``) and runs with (``Pulling``), are images.store's.

- apptainer, singularity: a SIF file (images.sif_pull);
- pyxis: an enroot squashfs file (images.enroot);
- charliecloud: an image directory (images.charliecloud);
- docker, podman: the engine's own store (images.engine_pull).
"""

from __future__ import annotations

from ctrain.errors import ConfigError
from ctrain.images.charliecloud import CharliecloudStore
from ctrain.images.engine_pull import EngineStore
from ctrain.images.enroot import EnrootStore
from ctrain.images.sif_pull import SifStore
from ctrain.images.store import PullAsk, Pulling, PullPlan, PullResult, Store
from ctrain.names import CHARLIECLOUD, ENGINE_RUNTIMES, PYXIS, SIF_RUNTIMES

STORES: dict[str, Store] = {
    **{name: SifStore() for name in SIF_RUNTIMES},
    **{name: EngineStore() for name in ENGINE_RUNTIMES},
    CHARLIECLOUD: CharliecloudStore(),
    PYXIS: EnrootStore(),
}


def store_of(runtime: str) -> Store:
    """The store of ``runtime``, or a ConfigError naming every runtime that pulls."""
    found = STORES.get(runtime)
    if found is None:
        raise ConfigError(
            f"the {runtime} runtime has no images to pull",
            f"choose --runtime: one of {', '.join(STORES)}",
        )
    return found


def plan(asked: PullAsk) -> PullPlan:
    """Where a pull goes, checked before anything is written."""
    return store_of(asked.runtime).plan(asked)


def pull(plan: PullPlan, run: Pulling) -> PullResult:
    """Run the pull ``plan`` with its runtime's store."""
    return store_of(plan.runtime).pull(plan, run)
