"""The JSON-lines log ($FAKE_APPTAINER_LOG): one line per call, written once, and events."""

from __future__ import annotations

import json
import os


class Call:
    """The log line of one call: argv, pid, host, the program's own variables and, for
    exec/run/shell, ``container``; ``write`` appends it once."""

    def __init__(self, argv: list[str], environ: dict[str, str]) -> None:
        self.path = environ.get("FAKE_APPTAINER_LOG")
        own = {k: v for k, v in environ.items() if k.startswith(("APPTAINER", "SINGULARITY"))}
        self.line: dict[str, object] = {
            "argv": argv, "pid": os.getpid(), "host": os.uname().nodename, "env": own,
        }  # fmt: skip
        self.written = False

    def write(self) -> None:
        if not self.written:
            self.written = True
            self.event(self.line)

    def event(self, line: dict[str, object]) -> None:
        if self.path:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(line) + "\n")
