"""Pull the final answer out of a model's text. Pure string work: no sympy, safe to call anywhere.

Rules, first that applies wins (documented in `envs/math/README.md` too):

1. `boxed`: the last `\\boxed{...}` or `\\fbox{...}` whose braces balance (`\\{` and `\\}` do not count),
   or the brace-less form `\\boxed 42`.
2. `hashes`: text after the last `####` up to the end of its line (GSM8K style).
3. `answer_phrase`: text after the last "answer is", "answer:" or "answer =" (any case, so "The final
   answer is" too), up to the end of its line. If that text is not LaTeX and starts with a number, only the
   number is kept ("The answer is 18 dollars." -> "18").
4. `last_number`: the last number in the text (integer, comma-grouped, decimal or a/b fraction).

The chosen text is then cleaned: surrounding whitespace, `$...$`, `\\(...\\)`, `\\[...\\]` and markdown
`**` are removed, as are trailing sentence punctuation and a lone leading currency `$`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Rule = Literal["boxed", "hashes", "answer_phrase", "last_number"]


@dataclass(frozen=True)
class ExtractedAnswer:
    text: str
    rule: Rule


_BOX = re.compile(r"\\(?:boxed|fbox)")


def _braced(text: str, start: int) -> str | None:
    """Content of the group opening at text[start] == '{', or None if it never closes."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2  # an escaped character, \{ and \} included, never opens or closes
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last well-formed `\\boxed{...}` / `\\fbox{...}` (or `\\boxed x`), else None."""
    for m in reversed(list(_BOX.finditer(text))):
        j = m.end()
        if j < len(text) and (text[j].isalpha()):
            continue  # \boxedsomething is another command
        k = j
        while k < len(text) and text[k] in " \t":
            k += 1
        if k < len(text) and text[k] == "{":
            inner = _braced(text, k)
            if inner is not None:
                return inner
            continue
        if k > j:  # \boxed 42: one token
            tok = re.match(r"[^\s$]+", text[k:])
            if tok:
                return tok.group(0)
    return None


_HASHES = re.compile(r"####[ \t]*([^\n]*)")
_PHRASE = re.compile(r"\banswer\b[ \t]*(?:is\b[ \t]*[:=]?|[:=])[ \t]*([^\n]*)", re.IGNORECASE)
_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?|[-+]?\.\d+"
_LAST_NUMBER = re.compile(rf"(?<![\w.])(?:{_NUMBER})")
_LEADING_NUMBER = re.compile(rf"(?:{_NUMBER})(?=$|[\s.,;:!?)])")
_WRAPS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**"))


def clean_answer(text: str) -> str:
    """Strip the wrapping and punctuation around an answer (see the module docstring)."""
    s = text.strip()
    while True:
        before = s
        s = s.rstrip(" \t.,;:!?").strip()
        for a, b in _WRAPS:
            if len(s) >= len(a) + len(b) and s.startswith(a) and s.endswith(b):
                s = s[len(a) : len(s) - len(b)].strip()
        if s.startswith("$") and "$" not in s[1:]:
            s = s[1:].lstrip()  # "$18": a currency sign, not math mode
        if s == before:
            return s


def _phrase_answer(raw: str) -> str:
    s = clean_answer(raw)
    if "\\" in s or "$" in raw.strip()[1:]:
        return s  # LaTeX: keep it whole, the verifier parses it
    m = _LEADING_NUMBER.match(s)
    if m:
        return m.group(0)
    return s


def extract_answer(text: str) -> ExtractedAnswer | None:
    """The model's final answer per the module's rules, or None when the text has none."""
    boxed = last_boxed(text)
    if boxed is not None and clean_answer(boxed):
        return ExtractedAnswer(clean_answer(boxed), "boxed")
    hashes = _HASHES.findall(text)
    if hashes and clean_answer(hashes[-1]):
        return ExtractedAnswer(clean_answer(hashes[-1]), "hashes")
    phrases = _PHRASE.findall(text)
    if phrases:
        ans = _phrase_answer(phrases[-1])
        if ans:
            return ExtractedAnswer(ans, "answer_phrase")
    numbers = _LAST_NUMBER.findall(text)
    if numbers:
        return ExtractedAnswer(numbers[-1], "last_number")
    return None
