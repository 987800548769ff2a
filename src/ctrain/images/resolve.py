"""The image a container gets: a remote reference on apptainer or singularity becomes one local
SIF file, pulled once through ``ctrain pull`` (its lock, its record, its atomic rename); on
charliecloud, one image directory (``images.stores.charliecloud``), the same way.

Apptainer asks the registry for a ``docker://`` manifest before it looks at its own cache, so a
remote reference handed to every rank needs the network on every compute node, and on a cold
cache every rank converts the image at once. ctrain therefore never hands apptainer a remote
reference to run: it runs the file ``ctrain pull`` wrote in the cache (``CACHE/images/``). When
the pull's record says the file is there and whole, nothing touches the network. Several ranks of
one step never pull: the job scripts resolve the image once in the batch step
(``ctrain resolve``), and a rank that finds no pulled file refuses with that fix.

Docker and podman pull on each node themselves, the host runtime has no image, and a local file is
used as it is: those references are returned as given. On pyxis a remote reference
(``docker://...``) is imported once by ``enroot import`` (images.stores.enroot, through the same
pull machinery) and the squashfs file is returned, so the nodes of a step do not each import it; a
local file, or enroot's own ``REGISTRY#REPO:TAG`` (imported by pyxis on each node), is returned in
enroot's form (ctrain.references).

Pure: ``decide_image`` (the decision table; its first row, ``runs_from_cache``, is asked alone
too) and ``ranks``. ``choose`` reads the record and the file's header; ``fetch`` runs the pull.
The pull machinery (images.pull, cachedir, the stores) is imported only where an image may be
pulled, so an exec of a local file does not load it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from ctrain.errors import ConfigError, SpecError
from ctrain.launch.jobenv import MpiEnv, SlurmEnv
from ctrain.names import CACHED_RUNTIMES, PYXIS, SIF_RUNTIMES
from ctrain.references import is_remote
from ctrain.settings_table import Settings

if TYPE_CHECKING:
    from ctrain.images.cachedir import CacheChoice
    from ctrain.images.stores.base import PullPlan

Decision = Literal["as given", "pulled", "pull", "refuse"]


def runs_from_cache(runtime: str, remote: bool) -> bool:
    """Whether ``runtime`` runs the image from a file ctrain's pull writes in the cache: a remote
    image on a cached runtime. The first row of ``decide_image``, asked on its own before the
    record and the ranks are looked at."""
    return runtime in CACHED_RUNTIMES and remote


def decide_image(runtime: str, remote: bool, recorded: bool, ranks: int) -> Decision:
    """What to run for an image: ``as given`` (a local file; docker, podman, host), ``pulled``
    (the local file ctrain's pull recorded), ``pull`` (pull it now, then run the file), or
    ``refuse`` (not pulled, and several ranks would each pull it at once)."""
    if not runs_from_cache(runtime, remote):
        return "as given"
    if recorded:
        return "pulled"
    return "pull" if ranks <= 1 else "refuse"


def ranks(environ: Mapping[str, str]) -> int:
    """How many processes run this same command: the tasks of the srun step or the MPI world
    this process belongs to; 1 elsewhere (a login node, a batch step)."""
    slurm = SlurmEnv.from_environ(environ)
    step = slurm.step_num_tasks if slurm.in_step and slurm.step_num_tasks else 1
    return max(step, MpiEnv.from_environ(environ).size or 1)


class ImageChoice(NamedTuple):
    image: str  # what the runtime is given: the local SIF file, or the image as given
    pull: PullPlan | None = None  # the pull to run before, when the file is not there yet
    cache: CacheChoice | None = None  # the cache the pull uses
    tmpdir: Path | None = None  # apptainer's temporary space for the pull

    def pull_env(self) -> dict[str, str]:
        """The variables ctrain adds to the pull's environment (none without a pull)."""
        if self.pull is None or self.cache is None or self.tmpdir is None:
            return {}
        from ctrain.images.pull import store_of

        return store_of(self.pull.runtime).pull_env(self.pull, self.cache, self.tmpdir)


FILE_SUFFIXES = (".sif", ".simg", ".img", ".sqsh", ".squashfs")


def names_a_file(image: str, runtime: str) -> bool:
    """A local ``image`` is a file or directory: always on apptainer and singularity, and on any
    runtime when written as a path (``/``, ``./``, ``../``) or with an image file's suffix."""
    return (
        runtime in SIF_RUNTIMES
        or image.startswith(("/", "./", "../"))
        or image.endswith(FILE_SUFFIXES)
    )


def choose(
    image: str,
    runtime: str,
    program: str,
    settings: Settings,
    environ: Mapping[str, str],
) -> ImageChoice:
    """The image ``runtime`` runs for ``image``, and the pull to run first if any. A local image
    file that is not there is refused here, where it is first named (``ctrain resolve`` in a
    job's batch step), not on every rank."""
    remote = is_remote(image, "exec")
    if not remote and names_a_file(image, runtime) and not os.path.exists(image):
        raise SpecError(
            f"image {image!r} does not exist",
            "check the path, or pull it there first: ctrain pull -o PATH REF",
        )
    if runtime == PYXIS and not remote:  # a file, or one pyxis imports on each node
        from ctrain.references import enroot_image

        return ImageChoice(image=enroot_image(image, os.getcwd()))
    if not runs_from_cache(runtime, remote):
        return ImageChoice(image=image)
    from ctrain.images import cachedir, pull
    from ctrain.images.stores.base import PullAsk

    cache = cachedir.resolve_cache_dir(settings, environ)
    plan = pull.plan(PullAsk(ref=image, runtime=runtime, program=program, cache_root=cache.path))
    count = ranks(environ)
    decision = decide_image(runtime, remote, pull.store_of(runtime).recorded(plan), count)
    if decision == "refuse":
        raise ConfigError(
            f"{image} is not pulled, and each of the {count} ranks of this step would pull it "
            f"at once (with the network on every node)",
            f"pull it once before the step (ctrain pull {image}, e.g. on a login node), or "
            "submit with ctrain's job scripts, which resolve it in the batch step",
        )
    if decision == "pulled":
        return ImageChoice(image=str(plan.target), cache=cache)
    return ImageChoice(
        image=str(plan.target),
        pull=plan,
        cache=cache,
        tmpdir=cachedir.build_tmpdir(settings, environ),
    )


def fetch(
    choice: ImageChoice,
    environ: Mapping[str, str],
    min_free_gb: int,
    say: Callable[[str], None],
) -> None:
    """Run ``choice``'s pull, if it has one, as ``ctrain pull`` would (free space, apptainer's
    temporary space); it waits for a concurrent pull of the same file."""
    if choice.pull is None or choice.cache is None:
        return
    from ctrain.images import cachedir, pull
    from ctrain.images.stores.base import Pulling

    cachedir.ensure_dirs(choice.cache)
    pull.pull(choice.pull, Pulling(choice.cache, environ, min_free_gb, say, tmpdir=choice.tmpdir))
