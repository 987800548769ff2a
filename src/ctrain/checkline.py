"""One line of a check, the one record every checker returns and ``ctrain doctor`` prints: what
was checked, its status, what was found, and the fix (empty on PASS). The ground floor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["PASS", "WARN", "FAIL"]


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""
