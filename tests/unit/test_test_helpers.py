"""The helpers the integration tests read their processes' output with."""

from __future__ import annotations

from tests.support.helpers import printed_json


def test_printed_json_one_value_per_line() -> None:
    text = 'noise\nRESULT {"rank": 0}\nRESULT {"rank": 1}\n'
    assert printed_json(text, "RESULT") == [{"rank": 0}, {"rank": 1}]


def test_printed_json_two_ranks_on_one_line() -> None:
    # rank 1's newline came after rank 0's whole print: CI's mpirun run, 2026-11-25
    text = 'RESULT {"rank": 1, "loss": [2.0]}RESULT {"rank": 0, "loss": [2.0]}\n\n'
    assert printed_json(text, "RESULT") == [{"rank": 1, "loss": [2.0]}, {"rank": 0, "loss": [2.0]}]


def test_printed_json_prefixed_and_other_tags() -> None:
    text = '[1]<stdout>:START {"epoch": 0}\n[0]<stdout>:RESULT [1, 2]\nMY_RESULT {"no": 1}\n'
    assert printed_json(text, "RESULT") == [[1, 2]]
    assert printed_json(text, "START") == [{"epoch": 0}]


def test_printed_json_none() -> None:
    assert printed_json("RESULT pending\n", "RESULT") == []
