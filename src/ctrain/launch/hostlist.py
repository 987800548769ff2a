"""Slurm hostlist and tasks-per-node expansion, done in Python (no scontrol).

Follows Slurm's own rules: zero padding is the width of each range term's lower bound, several
bracket groups expand as a product with the first group varying slowest, order is kept as written
and duplicates are kept.
"""

from __future__ import annotations

import itertools
import re

from ctrain.errors import EnvironmentParseError

MAX_HOSTS = 100_000
"""Largest expansion accepted; anything bigger is refused as malformed."""

_HOSTLIST_FIX = "check the value Slurm set; it should look like node[01-04],gpu1"
_TASKS_FIX = "check the value Slurm set; it should look like 2(x3),1"
_RANGE_TERM = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_TASKS_TERM = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")
_BRACKET = re.compile(r"\[([^\]]*)\]")

# One range term of a bracket group: (low, high, zero-padded width).
_Range = tuple[int, int, int]


def _hostlist_error(variable: str, value: str, reason: str) -> EnvironmentParseError:
    return EnvironmentParseError(
        f"{variable}={value!r} is not a valid Slurm hostlist: {reason}.", _HOSTLIST_FIX
    )


def _split_top_level(value: str, variable: str) -> list[str]:
    """Split on commas outside brackets; refuse nested or unbalanced brackets."""
    parts: list[str] = []
    start = 0
    depth = 0
    for index, char in enumerate(value):
        if char == "[":
            if depth:
                raise _hostlist_error(variable, value, "nested brackets")
            depth = 1
        elif char == "]":
            if not depth:
                raise _hostlist_error(variable, value, "']' without a matching '['")
            depth = 0
        elif char == "," and not depth:
            parts.append(value[start:index])
            start = index + 1
    if depth:
        raise _hostlist_error(variable, value, "'[' without a matching ']'")
    parts.append(value[start:])
    return parts


def _parse_ranges(body: str, variable: str, value: str) -> list[_Range]:
    """The terms of one bracket group, such as ``1-3,7,09-10``."""
    if not body:
        raise _hostlist_error(variable, value, "empty range '[]'")
    ranges: list[_Range] = []
    for term in body.split(","):
        match = _RANGE_TERM.fullmatch(term)
        if match is None:
            raise _hostlist_error(variable, value, f"range term {term!r} is not N or N-M")
        low_text, high_text = match.group(1), match.group(2)
        low = int(low_text)
        high = low if high_text is None else int(high_text)
        if high < low:
            raise _hostlist_error(variable, value, f"range {term!r} is descending")
        ranges.append((low, high, len(low_text)))
    return ranges


def _group_size(ranges: list[_Range]) -> int:
    return sum(high - low + 1 for low, high, _ in ranges)


def _group_names(ranges: list[_Range]) -> list[str]:
    return [f"{number:0{width}d}" for low, high, width in ranges for number in range(low, high + 1)]


def _parse_element(element: str, variable: str, value: str) -> tuple[list[str], list[list[_Range]]]:
    """Split one host pattern into its literal pieces and its bracket groups."""
    if not element:
        raise _hostlist_error(variable, value, "empty host name")
    if any(char.isspace() for char in element):
        raise _hostlist_error(variable, value, f"whitespace inside host name {element!r}")
    pieces = _BRACKET.split(element)
    literals = pieces[0::2]
    groups = [_parse_ranges(body, variable, value) for body in pieces[1::2]]
    return literals, groups


def _expand_element(literals: list[str], groups: list[list[_Range]]) -> list[str]:
    """Cartesian product, first bracket group varying slowest (as Slurm does)."""
    names: list[str] = []
    for numbers in itertools.product(*(_group_names(group) for group in groups)):
        pieces = [literals[0]]
        for number, literal in zip(numbers, literals[1:], strict=True):
            pieces += [number, literal]
        names.append("".join(pieces))
    return names


def expand_hostlist(value: str, variable: str = "hostlist") -> list[str]:
    """Expand a Slurm hostlist such as ``gpu[01-02],cn1.cluster`` in Slurm's order.

    ``variable`` names the source in error messages. An empty value is an empty list.
    """
    text = value.strip()
    if not text:
        return []
    parsed = [
        _parse_element(element.strip(), variable, value)
        for element in _split_top_level(text, variable)
    ]
    total = 0
    for _, groups in parsed:
        count = 1
        for group in groups:
            count *= _group_size(group)
        total += count
        if total > MAX_HOSTS:
            raise _hostlist_error(variable, value, f"it expands to more than {MAX_HOSTS} hosts")
    hosts: list[str] = []
    for literals, groups in parsed:
        hosts += _expand_element(literals, groups)
    return hosts


def _tasks_error(variable: str, value: str, reason: str) -> EnvironmentParseError:
    return EnvironmentParseError(
        f"{variable}={value!r} is not a valid Slurm tasks-per-node value: {reason}.", _TASKS_FIX
    )


def expand_tasks_per_node(value: str, variable: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """Expand Slurm's compressed tasks-per-node form: ``3(x2),1`` -> ``[3, 3, 1]``.

    An empty value is an empty list.
    """
    text = value.strip()
    if not text:
        return []
    counts: list[int] = []
    for raw in text.split(","):
        term = raw.strip()
        match = _TASKS_TERM.fullmatch(term)
        if match is None:
            raise _tasks_error(variable, value, f"term {term!r} is not N or N(xR)")
        repeat = 1 if match.group(2) is None else int(match.group(2))
        if repeat == 0:
            raise _tasks_error(variable, value, f"term {term!r} repeats zero times")
        if len(counts) + repeat > MAX_HOSTS:
            raise _tasks_error(variable, value, f"it expands to more than {MAX_HOSTS} nodes")
        counts += [int(match.group(1))] * repeat
    return counts
