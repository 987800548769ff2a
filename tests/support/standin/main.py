"""The stand-in's command dispatch: which program it is, one log line per call, Apptainer's
FATAL line and exit 255 for its own failures, its parser's error line and exit 1 for a bad
command line."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from tests.support.standin.identity import Fatal, Identity, Interrupted, Usage, identify
from tests.support.standin.log import Call


def dispatch(argv: list[str], environ: dict[str, str], who: Identity, call: Call) -> int:
    verb = argv[0] if argv else ""
    if verb in ("exec", "run", "shell"):
        from tests.support.standin.action import action

        return action(verb, argv[1:], environ, who, call)
    if argv[:2] == ["overlay", "create"]:
        from tests.support.standin.overlay import overlay_create

        ran: list[list[str]] = []
        call.line["ran"] = ran  # logged once done
        return overlay_create(argv[2:], who, ran)
    call.write()  # the others log first: a slow pull is visible in the log while it runs
    if argv in (["--version"], ["version"]):
        print(who.banner() if verb == "--version" else who.version_text)
        return 0
    if verb == "pull":
        from tests.support.standin.images import pull

        return pull(argv[1:], environ, who, call.event)
    if verb in ("build", "inspect"):
        from tests.support.standin import build

        if verb == "inspect":
            return build.inspect(argv[1:], environ, who)
        return build.build(argv[1:], environ, who, call.event)
    raise Fatal(f"unknown command {argv}")


def main(argv: list[str], environ: dict[str, str]) -> int:
    """Run one call as ``argv[0]`` (its base name says apptainer or singularity)."""
    who = identify(Path(argv[0]).name, environ)
    call = Call(argv[1:], environ)
    for warning in who.conflicts(environ):
        print(warning, file=sys.stderr)
    try:
        status = dispatch(argv[1:], environ, who, call)
    except Usage as exc:
        print(exc, file=sys.stderr)
        return 1
    except (Fatal, Interrupted, OSError) as exc:  # Apptainer's own failures: one line, 255
        print(f"FATAL:   {exc}", file=sys.stderr)
        return 255
    finally:
        call.write()
    if status < 0:  # the command died of signal -status, and so does Apptainer (1.4.5, measured)
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        return 128 - status  # a signal whose default is to be ignored
    return status
