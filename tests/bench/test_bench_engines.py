"""`atgrpo-bench engines`' token identity: the arithmetic of the row that says whether the engines'
greedy tokens equal transformers' (the timing and the engines themselves run in the bench only)."""

from __future__ import annotations

import pytest

from atgrpo.bench.engines import token_identity


def test_identical_sequences_count_whole() -> None:
    assert token_identity([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]]) == (1.0, 1.0)


def test_a_difference_counts_its_agreeing_prefix() -> None:
    # first: parts after 1 of 4 tokens; second: identical; third: stops early (2 of 3 agree, then ends).
    identical, prefix = token_identity([[1, 9, 9, 9], [7], [5, 6]], [[1, 2, 3, 4], [7], [5, 6, 8]])
    assert identical == pytest.approx(1 / 3)
    assert prefix == pytest.approx((1 / 4 + 1 + 2 / 3) / 3)


def test_other_prompts_are_refused() -> None:
    with pytest.raises(ValueError, match="same prompts"):
        token_identity([[1]], [[1], [2]])
