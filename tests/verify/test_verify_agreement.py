"""Where the fast path decides, it decides as Math-Verify does (run with the fast path off)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atgrpo.data import load_gsm8k
from atgrpo.verify import MathVerifier, fast_compare


def variants(gold: str) -> list[str]:
    """Formatted and perturbed versions of an integer gold answer."""
    n = int(gold)
    return [
        gold,
        f"{n:,}",
        f"{n}.0",
        f"{n}.00",
        str(-n),
        str(n + 1),
        f"\\frac{{{2 * n}}}{{2}}",
        f"{n}/1",
        f"{n / 10:g}",
        f"0{n}" if n >= 0 else gold,
        f"+{n}" if n >= 0 else gold,
        f"{n * 1000:,}",
        f"{n}.5",
        f"{n}.000001",
        f"{n / 3:.6f}",
    ]


def check_agreement(verifier: MathVerifier, pairs: list[tuple[str, str]]) -> int:
    decided = [(a, g, d) for a, g in pairs if (d := fast_compare(a, g)) is not None]
    verdicts = verifier.verify_batch([a for a, _, _ in decided], [g for _, g, _ in decided], extract=False)
    assert all(v.path == "verifier" for v in verdicts)
    wrong = [(a, g, d, v.reason) for (a, g, d), v in zip(decided, verdicts) if v.correct != d]
    assert not wrong, wrong[:20]
    return len(decided)


@pytest.mark.integration
def test_gsm8k_test_answers_in_variants(slow_verifier: MathVerifier, gsm8k_test: Path) -> None:
    golds = sorted({p.answer for p in load_gsm8k(gsm8k_test)})
    pairs = sorted({(a, g) for g in golds for a in variants(g)})
    assert check_agreement(slow_verifier, pairs) > 4000


TRICKY = [
    ("0.5", "\\frac{1}{2}"),
    ("-0.5", "-\\frac{1}{2}"),
    ("-0.5", "\\frac{-1}{2}"),
    ("0.25", "\\tfrac{1}{4}"),
    ("0.75", "\\dfrac{3}{4}"),
    ("3/4", "0.75"),
    ("-3/4", "-0.75"),
    ("1/3", "0.3333"),
    ("2/3", "0.67"),
    ("2/6", "1/3"),
    ("1/3", "1/4"),
    ("7", "7.000"),
    ("7", "007"),
    ("7", "+7"),
    ("-7", "-7.0"),
    ("0", "-0"),
    ("0", "0.0"),
    ("0", ".0"),
    ("0.1", ".1"),
    ("1234.5", "1,234.5"),
    ("1000000", "1,000,000"),
    ("1000000", "1,000"),
    ("12", "11.99999"),
    ("12", "12.00001"),
    ("999999999", "999999999.5"),
    ("99999999999999999999", "99999999999999999999"),
    ("99999999999999999999", "99999999999999999998"),
    ("0.00001", "0.00002"),
    ("3.14159", "3.1416"),
    ("10", "\\frac{20}{2}"),
    ("-10", "\\frac{-20}{2}"),
    ("2.5", "5/2"),
    ("2.50", "2.5"),
    ("123456.789", "123456.789"),
    ("31.25", "\\frac{125}{4}"),
]


def test_tricky_cases(slow_verifier: MathVerifier) -> None:
    assert check_agreement(slow_verifier, TRICKY) == len(TRICKY)


def _forms(q: Fraction) -> list[str]:
    out = [f"{q.numerator}/{q.denominator}", f"\\frac{{{q.numerator}}}{{{q.denominator}}}"]
    if q.denominator == 1:
        out += [str(q.numerator), f"{q.numerator:,}", f"{q.numerator}.0"]
    if 10**6 % q.denominator == 0:
        out.append(f"{float(q):.6f}".rstrip("0"))
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=40),
    st.fractions(min_value=-(10**6), max_value=10**6, max_denominator=40),
    st.data(),
)
def test_random_rationals(slow_verifier: MathVerifier, a: Fraction, b: Fraction, data: st.DataObject) -> None:
    other = data.draw(st.sampled_from([a, b, a + Fraction(1, 100000), -a]))
    fa, fb = data.draw(st.sampled_from(_forms(a))), data.draw(st.sampled_from(_forms(other)))
    check_agreement(slow_verifier, [(fa, fb)])
