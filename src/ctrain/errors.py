"""The one error family of ctrain, and every exit status it documents (README, "Exit codes").

Library code raises; the CLI prints one ``ctrain: error: ... Fix: ...`` line and exits with
the class's ``exit_code``. Several classes share 2 (something the user gave is wrong).
"""

from __future__ import annotations

import errno
import sys
from typing import NoReturn

from ctrain import __version__

#: The exit status with which training asks its job script to requeue the job (EX_TEMPFAIL).
REQUEUE_EXIT_CODE = 75
#: The exit status of a rank that ended itself because no training step ended for the stall
#: timeout (train/watchdog.py), as timeout(1) ends what runs too long; also of a rank that ended
#: because a peer's process was lost (train/peerwatch.py): a fault of the moment, not its own.
STALLED_EXIT_CODE = 124


class CtrainError(Exception):
    """A problem the user can fix. ``fix`` says how; ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def line(self) -> str:
        """The single line the CLI prints on stderr (line breaks in the text become spaces)."""
        text = f"ctrain: error: {self.message}" + (f" Fix: {self.fix}" if self.fix else "")
        return " ".join(part.strip() for part in text.splitlines() if part.strip())


class UsageError(CtrainError):
    """A command line the CLI cannot parse: unknown command or option, missing or bad value."""

    exit_code = 2


class ConfigError(CtrainError):
    """A malformed config file or setting value."""

    exit_code = 2


class JobRequestError(ConfigError):
    """A job request (``ctrain job render|submit``) that cannot work as asked."""


class SpecError(CtrainError):
    """A container option that cannot work as given."""

    exit_code = 2


class DataError(CtrainError):
    """A dataset that is not where it should be, or a folder that is not a dataset."""

    exit_code = 2


class EnvironmentParseError(CtrainError):
    """A Slurm, MPI or GPU variable whose value cannot be understood."""

    exit_code = 3


class LaunchError(CtrainError):
    """A launch that would run in the wrong mode or collide: refused before anything starts."""

    exit_code = 4


class ExternalToolError(CtrainError):
    """A program ctrain runs (sbatch, docker, apptainer, ...) is missing or failed."""

    exit_code = 5


class PullError(ExternalToolError):
    """A pull's download failed: the registry refused the image, has no such image, or could
    not be reached."""

    @classmethod
    def unpublished(cls, image: str, cause: CtrainError) -> PullError:
        """The failed pull of the `image` setting's default ``image``, which no registry holds
        until a release publishes it: build it, or push it to a registry of one's own."""
        v = __version__
        return cls(
            f"the default image {image} is not published (yet), or its registry cannot be "
            f"reached ({cause.message})",
            "build it here with `make image` (or `make image-cpu`) in a checkout of ctrain and "
            f"set CTRAIN_IMAGE=... to what it built (build/ctrain-{v}.sif with apptainer; with "
            f"Docker, ctrain:{v} for --runtime docker, docker-daemon:ctrain:{v} for apptainer), "
            "or push it to your site's registry with `make push REGISTRY=...` and pull that "
            f"(CTRAIN_IMAGE=docker://REGISTRY/ctrain:{v})",
        )


class CheckpointError(CtrainError):
    """A checkpoint that cannot be used: another model or configuration, or damaged."""

    exit_code = 6


class FileAccessError(CtrainError):
    """A file or directory the system refused (an OSError): missing, not permitted, disk full."""

    exit_code = 7

    @classmethod
    def from_oserror(cls, exc: OSError) -> FileAccessError:
        """The error naming the file(s) and the system's reason, with a fix for the usual ones."""
        names = [str(name) for name in (exc.filename, exc.filename2) if name is not None]
        reason = exc.strerror or str(exc)
        where = " -> ".join(names) + ": " if names else ""
        return cls(f"{where}{reason}", _OS_FIXES.get(exc.errno or 0, _OS_FIX))


_OS_FIX = "check the path and its permissions, then run the command again"
_OS_FIXES = {
    errno.ENOENT: "create the missing directory, or give a path that exists",
    errno.ENOTDIR: "give a path whose parents are directories",
    errno.EISDIR: "give a file name, not a directory",
    errno.EACCES: "give a path you may write (or read), or change its permissions",
    errno.EPERM: "give a path you may write (or read), or change its permissions",
    errno.EROFS: "give a path on a writable file system",
    errno.ENOSPC: "free space there, or give a path on another file system",
    errno.EEXIST: "remove it, or give another path",
}


class NodeFaultError(CtrainError):
    """A job that cannot go on: every node failed its preflight, or its fault retries are spent
    (slurm/faults.py)."""

    exit_code = 8


class Interrupted(CtrainError):
    """SIGINT (Ctrl-C), SIGTERM or SIGHUP: stopped, and what was half done removed."""

    exit_code = 130

    @classmethod
    def by_ctrl_c(cls) -> Interrupted:
        return cls("interrupted (SIGINT)", "run the command again")


def exit_with(error: CtrainError) -> NoReturn:
    """End the command: ``error``'s one line on stderr, its exit code."""
    print(error.line(), file=sys.stderr, flush=True)
    sys.exit(error.exit_code)
