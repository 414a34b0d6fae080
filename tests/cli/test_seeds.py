"""``--seeds``: one parser for ``simulate --protocol fgd`` and ``twin``."""

from __future__ import annotations

import pytest

from fusesched.cli.seeds import MAX_SEEDS, SeedsError, parse_seeds


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        ("42", [42]),
        ("42-45", [42, 43, 44, 45]),
        ("0, 3-4,9", [0, 3, 4, 9]),
        ("7,", [7]),
        (f"0-{MAX_SEEDS - 1}", list(range(MAX_SEEDS))),
    ],
)
def test_lists_and_ranges(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x", "expected e.g. 42-51 or 42,43"),
        ("-3", "whole numbers ≥ 0"),  # NumPy's generators refuse negative seeds
        ("3-", "expected e.g."),
        ("1.5", "expected e.g."),
        ("5-1", "empty range '5-1'"),
        ("", "at least one seed"),
        (" , ", "at least one seed"),
        (f"0-{MAX_SEEDS}", "at most 10,000 seeds"),
        ("1-99999999999", "at most 10,000 seeds"),
    ],
)
def test_bad_values_say_why(text: str, message: str) -> None:
    with pytest.raises(SeedsError, match=message):
        parse_seeds(text)
