"""The one error family of ctrain: library code raises, the CLI prints one line and exits."""

from __future__ import annotations


class CtrainError(Exception):
    """A problem the user can fix. ``fix`` says how; ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def line(self) -> str:
        """The single line the CLI prints on stderr."""
        return f"ctrain: error: {self.message}" + (f" Fix: {self.fix}" if self.fix else "")


class ConfigError(CtrainError):
    """A malformed config file or setting value."""

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
