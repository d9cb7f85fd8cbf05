"""Fast path: compare plain numbers exactly in-process, without sympy or a worker round trip.

A *plain number* is an optionally signed integer (`42`, `-7`, `007`, `1,234,567` with correct grouping),
a decimal (`3.25`, `.5`, `1,234.5`), or a fraction of integers (`3/4`, `\\frac{3}{4}`, `\\dfrac`/`\\tfrac`,
`-\\frac{3}{4}`, `\\frac{-3}{4}`). Exponents, percent signs, units and currency are not plain: such answers
go to Math-Verify. Values are exact `Fraction`s, so no float ever rounds here.

`fast_compare` only decides where Math-Verify is known to decide the same way (the tests check this on the
GSM8K answers and a set of tricky cases); everywhere else it returns None and the verifier is asked:

- equal values are equal, unless a decimal has more than 15 significant digits (sympy Floats carry 15);
- two exact values (integers, fractions) that differ are different;
- a decimal that differs from the other value by at least 1e-5, both below 1e9 in magnitude, is different.
  Closer pairs (1/3 vs 0.333333) are left to Math-Verify's own rounding rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_MAX_DIGITS = 50  # longer digit strings are left to the verifier (and never hit int's str limit)
_DECIMAL_DIGITS = 15
_INT = r"(?:\d{1,3}(?:,\d{3})+|\d+)"
_DEC = re.compile(rf"([+-]?)({_INT})?(?:\.(\d+))?")
_SLASH = re.compile(r"([+-]?)(\d+)/(\d+)")
_FRAC = re.compile(r"([+-]?)\\[dt]?frac\{\s*([+-]?)(\d+)\s*\}\{\s*(\d+)\s*\}")


@dataclass(frozen=True)
class PlainNumber:
    value: Fraction
    decimal: bool
    """Written with a decimal point (compared like a float by Math-Verify)."""
    significant: int
    """Significant digits as written (for decimals)."""


def parse_plain_number(text: str) -> PlainNumber | None:
    """The exact value of a plain number, or None when `text` is anything else."""
    s = text.strip()
    if not s or sum(c.isdigit() for c in s) > _MAX_DIGITS:
        return None
    m = _DEC.fullmatch(s)
    if m and (m.group(2) or m.group(3)):
        sign, whole, frac = m.group(1), (m.group(2) or "0").replace(",", ""), m.group(3)
        value = Fraction(int(whole + (frac or "")), 10 ** len(frac or ""))
        if sign == "-":
            value = -value
        digits = (whole + (frac or "")).lstrip("0") or "0"
        return PlainNumber(value, frac is not None, len(digits))
    m = _SLASH.fullmatch(s)
    if m:
        num, den = int(m.group(2)), int(m.group(3))
        if den == 0:
            return None
        return PlainNumber(Fraction(-num if m.group(1) == "-" else num, den), False, 0)
    m = _FRAC.fullmatch(s)
    if m:
        num, den = int(m.group(3)), int(m.group(4))
        if den == 0:
            return None
        negative = (m.group(1) == "-") != (m.group(2) == "-")
        return PlainNumber(Fraction(-num if negative else num, den), False, 0)
    return None


def fast_compare(answer: str, gold: str) -> bool | None:
    """True/False when both are plain numbers and the rules above decide; None to ask the verifier."""
    a, g = parse_plain_number(answer), parse_plain_number(gold)
    if a is None or g is None:
        return None
    if any(x.decimal and x.significant > _DECIMAL_DIGITS for x in (a, g)):
        return None
    if a.value == g.value:
        return True
    if not a.decimal and not g.decimal:
        return False
    if abs(a.value - g.value) >= Fraction(1, 100_000) and max(abs(a.value), abs(g.value)) < 10**9:
        return False
    return None
