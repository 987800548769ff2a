"""The files shipped inside the package: the job templates (ctrain/jobs/*.sbatch), the examples
users copy (ctrain/examples/*.py), the training's start-up hook (ctrain/train/startup).

They are package data (pyproject.toml), found beside the package's own code wherever ctrain is
installed: a source checkout or editable install (the repository's jobs/ and examples/ are
links to them), a wheel, the images, the copy carried into a container. ctrain is never
imported from a zip file, so the package is a directory; nothing walks up directories to find
them. (``importlib.resources`` would find the same directory, at the cost of importing
tempfile, shutil and the compressors on every rank's start.)
"""

from __future__ import annotations

from pathlib import Path

import ctrain
from ctrain.errors import CtrainError


def shipped_dir(name: str) -> Path:
    """The directory ``name`` (``jobs``, ``examples``) inside the installed ctrain package."""
    packaged = Path(ctrain.__file__).parent / name
    if not packaged.is_dir():
        raise CtrainError(
            f"ctrain's {name}/ is not installed beside its code ({packaged})",
            "reinstall ctrain (pip install --force-reinstall ctrain-hpc, or make install)",
        )
    return packaged
