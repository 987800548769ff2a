from __future__ import annotations

from pathlib import Path

import pytest

import ctrain
from ctrain.errors import CtrainError
from ctrain.util.shipped import shipped_dir


def test_shipped_directories_are_inside_the_package() -> None:
    package = Path(ctrain.__file__).parent
    assert shipped_dir("jobs") == package / "jobs"
    assert shipped_dir("examples") == package / "examples"


def test_a_missing_one_says_to_reinstall() -> None:
    with pytest.raises(CtrainError, match="ctrain's nothing/ is not installed") as caught:
        shipped_dir("nothing")
    assert "reinstall ctrain" in caught.value.fix
