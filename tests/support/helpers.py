"""What the tests share: an isolated environment, one way to run ctrain as a process, waiting
with a timeout, and a directory snapshot.

ctrain runs as the console script of the interpreter running the tests, with PYTHONPATH set to
the source the tests import, so a process runs the same ctrain as the test (a shared venv's
editable install may point at another checkout).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import ctrain
from ctrain.errors import CtrainError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]  # the checkout
PYPROJECT: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
DOCS_REFERENCE = REPO / "scripts" / "docs-reference.py"
BIN = Path(sys.executable).parent
CTRAIN = str(BIN / "ctrain")
SRC = str(Path(ctrain.__file__).resolve().parent.parent)
SYSTEM_PATH = "/usr/bin:/bin"
TIMEOUT = 60.0


@dataclass(frozen=True)
class Sandbox:
    """HOME, XDG_CONFIG_HOME, XDG_CACHE_HOME and XDG_STATE_HOME under ``root``, a fake bin dir
    first on PATH, and ``root`` as the working directory; ``env`` holds nothing of the caller's
    environment."""

    root: Path
    env: dict[str, str]

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    def with_env(self, **extra: str) -> dict[str, str]:
        return {**self.env, **extra}

    def add_program(self, name: str, text: str) -> Path:
        """A script called ``name`` in the fake bin dir."""
        program = self.bin / name
        program.write_text(text)
        program.chmod(0o755)
        return program


def sandbox(root: Path, path: str = SYSTEM_PATH, **extra: str) -> Sandbox:
    """An isolated environment under ``root``; ``path`` follows the fake bin dir on PATH."""
    for directory in (root / "home", root / "bin"):
        directory.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": f"{root / 'bin'}{os.pathsep}{path}",
        "HOME": str(root / "home"),
        "XDG_CONFIG_HOME": str(root / "home" / ".config"),
        "XDG_CACHE_HOME": str(root / "home" / ".cache"),
        "XDG_STATE_HOME": str(root / "home" / ".local" / "state"),
        **extra,
    }
    return Sandbox(root, env)


def ctrain_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the tests' ctrain source first on PYTHONPATH."""
    given = env.get("PYTHONPATH")
    return {**env, "PYTHONPATH": SRC + (os.pathsep + given if given else "")}


def run_ctrain(
    *args: str,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = TIMEOUT,
    stdin: str = "",
) -> subprocess.CompletedProcess[str]:
    """``ctrain ARGS`` to completion (or TimeoutExpired), ``stdin`` its input, output captured as
    text."""
    return subprocess.run(
        [CTRAIN, *args],
        env=ctrain_env(env),
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def start_ctrain(
    *args: str, env: Mapping[str, str], cwd: Path | None = None
) -> subprocess.Popen[str]:
    """``ctrain ARGS`` started, stdout and stderr piped as text (wait with a timeout)."""
    return subprocess.Popen(
        [CTRAIN, *args],
        env=ctrain_env(env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(
    check: Callable[[], bool], what: str, timeout: float = 20.0, interval: float = 0.02
) -> None:
    """Poll ``check`` every ``interval`` seconds until it holds; fail naming ``what`` after
    ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def snapshot(directory: Path) -> dict[str, bytes | None]:
    """Every path under ``directory``: a file's bytes, None for a directory."""
    return {
        str(p.relative_to(directory)): p.read_bytes() if p.is_file() else None
        for p in sorted(directory.rglob("*"))
    }


def printed_json(text: str, tag: str) -> list[Any]:
    """Each JSON value printed after ``TAG `` in ``text``, in order.

    Ranks share one stdout: with PYTHONUNBUFFERED a print is two writes (the text, then its
    newline), so another rank's line can land before the newline. Each value is decoded where it
    starts, never up to the line's end.
    """
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(text, m.end())[0] for m in re.finditer(rf"\b{tag} (?=[{{\[])", text)]


REGISTRY = "127.0.0.1:5000"  # the local registry `make services` starts


def registry_up() -> bool:
    """Whether the local registry answers its API root."""
    try:
        with urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def need(ok: bool, message: str) -> None:
    """A test's service or tool: skipped without it, but with CI=true a failure."""
    if ok:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


def refusal(call: Callable[[], object]) -> tuple[str, str]:
    """The message and the fix of the CtrainError that ``call`` raises."""
    with pytest.raises(CtrainError) as raised:
        call()
    return raised.value.message, raised.value.fix


def docs_reference() -> ModuleType:
    """scripts/docs-reference.py, the generator of the site's reference pages, as a module."""
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS_REFERENCE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
