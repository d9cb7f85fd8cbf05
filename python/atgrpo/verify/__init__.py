"""Answer checking. `verify_math(prediction, gold) -> Verdict`, or a `MathVerifier` pool for batches.

Importing this package is cheap: Math-Verify and sympy load only in the worker processes.
"""

from atgrpo.verify.extract import ExtractedAnswer, clean_answer, extract_answer, last_boxed
from atgrpo.verify.math import (
    MathVerifier,
    Reason,
    Verdict,
    VerifierStartError,
    answers_agree,
    default_verifier,
    verify_math,
)
from atgrpo.verify.numbers import PlainNumber, fast_compare, parse_plain_number

__all__ = [
    "ExtractedAnswer",
    "MathVerifier",
    "PlainNumber",
    "Reason",
    "Verdict",
    "VerifierStartError",
    "answers_agree",
    "clean_answer",
    "default_verifier",
    "extract_answer",
    "fast_compare",
    "last_boxed",
    "parse_plain_number",
    "verify_math",
]
