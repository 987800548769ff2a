"""The stand-in ``srun``: pyxis' options read and checked as srun with pyxis would (refusals
print srun's error line and exit 1), then the real srun runs with its other options and, in
each task, tests/support/standin_pyxis/task.py in front of the command."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.standin_pyxis.options import (
    PYXIS_OPTIONS,
    Asked,
    Refused,
    from_environment,
    ignored,
    split,
)

ROOT = Path(__file__).resolve().parents[3]  # the checkout holding tests/
TASK = (
    "import sys; sys.path.insert(0, {root!r}); "
    "from tests.support.standin_pyxis.task import main; sys.exit(main(sys.argv))"
)


def task_spec(asked: Asked, environ: dict[str, str]) -> str:
    """What every task gets: the options, and the image as FAKE_PYXIS_* models it."""
    spec = dataclasses.asdict(asked)
    spec.pop("given")
    spec["image_env"] = json.loads(environ.get("FAKE_PYXIS_IMAGE_ENV") or "{}")
    spec["image_workdir"] = environ.get("FAKE_PYXIS_IMAGE_WORKDIR") or "/"
    spec["log"] = environ.get("FAKE_PYXIS_LOG")
    return json.dumps(spec)


def plugin_help() -> str:
    """The lines a plugin's options add to ``srun --help`` (SPANK lists each with its plugin's
    name in brackets; the wording of pyxis' texts is not modelled)."""
    return "".join(
        f"      --{name}{'=VALUE' if valued else ''}\n{' ' * 30}[pyxis] (stand-in)\n"
        for name, valued in PYXIS_OPTIONS.items()
    )


def main(argv: list[str], environ: dict[str, str], real_srun: str) -> int:
    if argv[1:] == ["--help"]:
        done = subprocess.run([real_srun, "--help"], capture_output=True, text=True, check=False)
        print(done.stdout + "\n" + plugin_help(), end="")
        return done.returncode
    try:
        asked, others, command = split(argv[1:])
        from_environment(asked, environ)
    except Refused as exc:
        text = str(exc)
        print(text if text.startswith("srun:") else f"srun: error: {text}", file=sys.stderr)
        if "option" in text and text.startswith("srun:"):
            print('Try "srun --help" for more information', file=sys.stderr)
        return 1
    if asked.image is None:
        for line in ignored(asked):
            print(f"srun: error: {line}", file=sys.stderr)
        os.execv(real_srun, [real_srun, *others, *command])
    if not command:
        print("srun: fatal: No command given to execute.", file=sys.stderr)
        return 1
    wrapper = [sys.executable, "-I", "-S", "-c", TASK.format(root=str(ROOT))]
    os.execv(real_srun, [real_srun, *others, *wrapper, task_spec(asked, environ), *command])
