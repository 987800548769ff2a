"""Run a function on a module right after it is first imported, or now if it already was.

ctrain's start-up hooks (train/startup/sitecustomize.py) change TensorFlow and Keras classes
for scripts that never call ctrain, without importing TensorFlow themselves: each change waits
for its module here.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

Apply = Callable[[ModuleType], None]


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds one module with the other finders and calls ``apply`` once the module ran."""

    loader: importlib.abc.Loader

    def __init__(self, name: str, apply: Apply) -> None:
        self.name = name
        self.apply = apply

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.apply(module)


def when_imported(name: str, apply: Apply) -> None:
    """``apply(module)`` now if module ``name`` is imported, else as soon as it is (once)."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        apply(loaded)
        return
    waiting = (f for f in sys.meta_path if isinstance(f, _AfterImport))
    if not any(f.name == name and f.apply is apply for f in waiting):
        sys.meta_path.insert(0, _AfterImport(name, apply))


def waiting_for(name: str) -> bool:
    """Whether a function waits for module ``name`` (what the start-up hook armed)."""
    return any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path)
