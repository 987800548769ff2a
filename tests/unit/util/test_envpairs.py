"""util/envpairs.py: NAME=VALUE pairs and env files, and every refusal in full."""

from __future__ import annotations

import pytest

from ctrain.errors import SpecError
from ctrain.util.envpairs import parse_env_file, parse_env_pair


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("A=1", ("A", "1")),
        ("_x9=two words", ("_x9", "two words")),
        ("EMPTY=", ("EMPTY", "")),
        ("URL=a=b", ("URL", "a=b")),
    ],
)
def test_env_pair(text: str, pair: tuple[str, str]) -> None:
    assert parse_env_pair(text) == pair


@pytest.mark.parametrize("text", ["A", "=1", "9A=1", "A-B=1", "A B=1", " A=1", "A =1", "Ä=1"])
def test_env_pair_refused(text: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_env_pair(text)
    assert caught.value.message == f"--env {text!r} is not NAME=VALUE"
    assert caught.value.fix == "write --env NAME=VALUE"


def test_env_pair_refused_without_printing_a_secret() -> None:
    with pytest.raises(SpecError) as caught:
        parse_env_pair("MY-API-KEY=abc123")
    assert caught.value.message == "--env 'MY-API-KEY=<hidden>' is not NAME=VALUE"


def test_env_file_lines() -> None:
    text = "# comment\n\n  A=1  \nexport B=two words\nC=\n\t# indented comment\nA=2\n"
    assert parse_env_file(text, "vars.env") == {"A": "2", "B": "two words", "C": ""}


def test_env_file_names_the_file_and_line() -> None:
    with pytest.raises(SpecError) as caught:
        parse_env_file("A=1\n\n# c\nnot a pair\n", "vars.env")
    assert caught.value.message == "vars.env:4: 'not a pair' is not NAME=VALUE"
    assert caught.value.fix == "write --env NAME=VALUE"
