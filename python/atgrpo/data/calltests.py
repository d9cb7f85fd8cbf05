"""Function-call tests given as data (APPS `fn_name`, LiveCodeBench `functional`) turned into test statements.

Each test becomes one statement, `_atgrpo_check(name, args_json, want_json, unwrap)`, run after
`CALL_TEST_SETUP` in the solution's namespace. Arguments and the expected value travel as JSON text
(always a valid Python string literal via `repr`), so no test ever embeds a Python literal built from data.

Semantics follow the datasets' own checkers: the callee is `Solution().<name>` when the solution defines a
class `Solution` with that method (LeetCode style), else the module-level function `<name>`; tuples in the
result compare as lists; with `unwrap` (APPS) a result also passes when it equals the first element of a
list-valued expectation, because APPS stores many single return values wrapped in a list.
"""

from __future__ import annotations

import json
from typing import Any

JUDGE_PRELUDE = """\
import bisect, collections, functools, heapq, itertools, math, random, re, string, sys
from collections import Counter, OrderedDict, defaultdict, deque
from functools import cache, lru_cache, reduce
from heapq import heapify, heappop, heappush
from itertools import accumulate, combinations, permutations, product
from math import ceil, floor, gcd, inf, log, log2, sqrt
from typing import *
"""
"""Placed before APPS and LiveCodeBench solutions: both judges run candidates after a block of standard
imports, and LeetCode stubs annotate with `List[int]` without importing it."""

CALL_TEST_SETUP = """\
import json as _atgrpo_json


def _atgrpo_callee(name):
    cls = globals().get("Solution")
    if isinstance(cls, type) and hasattr(cls, name):
        return getattr(cls(), name)
    return globals()[name]


def _atgrpo_lists(value):
    if isinstance(value, (list, tuple)):
        return [_atgrpo_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _atgrpo_lists(v) for k, v in value.items()}
    return value


def _atgrpo_check(name, args_json, want_json, unwrap):
    got = _atgrpo_lists(_atgrpo_callee(name)(*_atgrpo_json.loads(args_json)))
    want = _atgrpo_json.loads(want_json)
    if got == want or (unwrap and isinstance(want, list) and want and got == want[0]):
        return
    raise AssertionError("%s(...) returned %.200r, expected %.200r" % (name, got, want))
"""


def call_test(name: str, args: list[Any], want: Any, *, unwrap: bool = False) -> str:
    """One test statement calling `name(*args)` and comparing with `want` (both JSON-serialisable)."""
    args_json = json.dumps(args, ensure_ascii=False)
    want_json = json.dumps(want, ensure_ascii=False)
    return f"_atgrpo_check({name!r}, {args_json!r}, {want_json!r}, {unwrap!r})"
