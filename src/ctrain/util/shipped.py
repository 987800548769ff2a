"""The files shipped inside the package: the job templates (ctrain/jobs/*.sbatch) and the
examples users copy (ctrain/examples/*.py).

They are package data (pyproject.toml), found through ``importlib.resources`` wherever ctrain
is installed: a source checkout or editable install (the repository's jobs/ and examples/ are
links to them), a wheel, the images. Nothing walks up directories to find them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ctrain.errors import CtrainError


def shipped_dir(name: str) -> Path:
    """The directory ``name`` (``jobs``, ``examples``) inside the installed ctrain package."""
    packaged = resources.files("ctrain").joinpath(name)
    if not isinstance(packaged, Path) or not packaged.is_dir():
        raise CtrainError(
            f"ctrain's {name}/ is not installed beside its code ({packaged})",
            "reinstall ctrain (pip install --force-reinstall ctrain-hpc, or make install)",
        )
    return packaged
