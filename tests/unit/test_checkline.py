"""The check line's statuses, ordered in one place, and the one warning line."""

from __future__ import annotations

from ctrain.checkline import STATUSES, rank, warning_line, worst


def test_the_statuses_are_ordered_mildest_first() -> None:
    assert STATUSES == ("PASS", "WARN", "FAIL")
    assert rank("PASS") < rank("WARN") < rank("FAIL")


def test_the_worst_status_decides() -> None:
    assert worst(["PASS", "WARN", "PASS"]) == "WARN"
    assert worst(["WARN", "FAIL", "PASS"]) == "FAIL"
    assert worst([]) == "PASS"


def test_the_warning_line() -> None:
    assert warning_line("it is slow.", "wait") == "ctrain: warning: it is slow. Fix: wait"
    assert warning_line("it is slow.") == "ctrain: warning: it is slow."
