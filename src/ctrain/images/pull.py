"""``ctrain pull``: the store of each runtime that pulls, chosen from one table, as
``container.runtimes`` chooses adapters; the pull steps themselves are images.store's.

- apptainer, singularity: a SIF file (images.sif_pull);
- pyxis: an enroot squashfs file (images.enroot);
- charliecloud: an image directory (images.charliecloud);
- docker, podman: the engine's own store (images.engine_pull).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from ctrain.errors import ConfigError
from ctrain.images import cachedir
from ctrain.images.charliecloud import CharliecloudStore
from ctrain.images.engine_pull import EngineStore
from ctrain.images.enroot import EnrootStore
from ctrain.images.sif_pull import SifStore
from ctrain.images.store import PullPlan, PullResult, Say, Show, Store
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


def plan_pull(
    ref: str,
    runtime: str,
    program: str,
    output: str | None,
    cache_root: Path,
    force: bool,
    is_dir: Callable[[Path], bool],
) -> PullPlan:
    """Where a pull goes, checked before anything is written."""
    return store_of(runtime).plan(ref, runtime, program, output, cache_root, force, is_dir)


def pull(
    plan: PullPlan,
    cache: cachedir.CacheChoice,
    environ: Mapping[str, str],
    min_free_gb: int,
    say: Say,
    *,
    tmpdir: Path | None = None,
    show: Show = lambda event: None,
    echo: Say = lambda line: None,
) -> PullResult:
    """Run the pull ``plan``; what it does goes to ``say``, docker's layer progress to
    ``show``, the pull tool's own output lines to ``echo``. ``tmpdir``: the tool's temporary
    space (``cachedir.build_tmpdir``; default $TMPDIR, else /tmp)."""
    store = store_of(plan.runtime)
    return store.pull(plan, cache, environ, min_free_gb, say, tmpdir=tmpdir, show=show, echo=echo)
