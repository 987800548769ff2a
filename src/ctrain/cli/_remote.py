"""What ``--on NAME`` does for a ``ctrain job`` command: the named cluster, its one SSH
connection opened (the only login of a session), its ctrain checked, then the command run by
that ctrain, its output shown as it comes and its exit code ours."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from ctrain.cli._options import settings_from
from ctrain.errors import Interrupted

if TYPE_CHECKING:
    from ctrain.remote.session import Link


def chosen(on: str | None) -> str | None:
    """The remote a job command runs on: --on, else CTRAIN_REMOTE, else a config file's
    ``remote``; None (or empty): here."""
    return settings_from({"remote": on}).remote or None


def connect(name: str) -> Link:
    """The cluster ``name``'s link: connected, and its ctrain no older than this one."""
    from ctrain.remote import registry, session

    path = registry.remotes_path(os.environ)
    remote = registry.find(registry.read(path), name, path)
    link = session.connect(remote, os.environ, settings_from({}).ssh_persist)
    session.check_ctrain(link)
    return link


def forward(name: str, args: Sequence[str]) -> NoReturn:
    """``ctrain ARGS`` on the cluster ``name``; exits with its exit code."""
    from ctrain.remote import session

    link = connect(name)
    try:
        code = session.run_ctrain(link, args)
    except KeyboardInterrupt as exc:
        raise Interrupted(
            f"stopped `ctrain {' '.join(args)}` on {name} (SIGINT); a job goes on",
            f"to stop a job: ctrain job cancel --on {name} JOBID",
        ) from exc
    sys.exit(code)
