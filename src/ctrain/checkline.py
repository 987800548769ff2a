"""One line of a check, the one record every checker returns and ``ctrain doctor`` prints: what
was checked, its status, what was found, and the fix (empty on PASS). The ground floor.

The statuses are ordered, mildest first (STATUSES): every comparison of severities goes through
``rank`` and ``worst``, and every ``ctrain: warning:`` line through ``warning_line``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Status = Literal["PASS", "WARN", "FAIL"]
STATUSES: tuple[Status, ...] = ("PASS", "WARN", "FAIL")  # mildest first


def rank(status: Status) -> int:
    """The severity of ``status``: 0 for PASS, higher is worse."""
    return STATUSES.index(status)


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe of ``statuses`` (PASS when there are none)."""
    return max(statuses, key=rank, default="PASS")


def warning_line(detail: str, fix: str = "") -> str:
    """The one line a warning prints on stderr."""
    return f"ctrain: warning: {detail}" + (f" Fix: {fix}" if fix else "")


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""
