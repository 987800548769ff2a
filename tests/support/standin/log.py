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
        """Append one line with one write(2): ranks writing at once never interleave."""
        if self.path:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (json.dumps(line) + "\n").encode())
            finally:
                os.close(fd)
