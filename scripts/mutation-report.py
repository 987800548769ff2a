"""The per-module score of the last ``mutmut run`` (``make mutation``), read from mutants/.

Usage: mutation-report.py PATTERN...  (the mutant-name patterns the run was given)

Prints a Markdown table (module, mutants, killed, timed out, survived, no tests, score) and the
surviving mutants by name (``mutmut show NAME`` prints one). The score is killed and timed out
over all selected mutants; docs/testing.md subtracts the equivalent ones. Exits 1 when a
selected mutant was not checked (the run stopped early)."""

from __future__ import annotations

import fnmatch
import json
import sys
from collections import Counter
from pathlib import Path

from mutmut.stats import status_by_exit_code

COLUMNS = ("killed", "timeout", "survived", "no tests")


def selected(meta: Path, patterns: list[str]) -> dict[str, str]:
    """Status by mutant name, for the mutants of one module that the patterns select."""
    codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
    return {
        name: status_by_exit_code[code]
        for name, code in codes.items()
        if any(fnmatch.fnmatch(name, pattern) for pattern in patterns)
    }


def main(patterns: list[str]) -> int:
    print("| module | mutants | killed | timed out | survived | no tests | score |")
    print("|---|---|---|---|---|---|---|")
    survivors: list[str] = []
    unchecked = 0
    for meta in sorted(Path("mutants").glob("src/**/*.py.meta")):
        statuses = selected(meta, patterns)
        if not statuses:
            continue
        count = Counter(statuses.values())
        caught = count["killed"] + count["timeout"]
        module = meta.relative_to("mutants").as_posix().removesuffix(".meta")
        cells = " | ".join(str(count[column]) for column in COLUMNS)
        print(f"| {module} | {len(statuses)} | {cells} | {100 * caught / len(statuses):.1f} % |")
        survivors += sorted(n for n, s in statuses.items() if s in ("survived", "no tests"))
        unchecked += len(statuses) - sum(count[column] for column in COLUMNS)
    print("\nsurvived or no test ran:" if survivors else "\nno survivors")
    print("\n".join(f"  {name}" for name in survivors))
    if unchecked:
        print(f"{unchecked} selected mutant(s) not checked or suspicious: run make mutation again")
    return 1 if unchecked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
