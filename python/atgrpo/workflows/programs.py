"""Programs in model answers: extracting them, checking that they compile, running a program that
prints its answer (games' tool agent in program mode, math's tool agent), and running a program
against tests a model wrote (the code workflow's tester). The one copy of each.

Model text is never executed on the host: the host only `compile`s or `ast.parse`s it; programs run in
the sandbox, and what they print is handed on as text (parsed by the caller, never evaluated). A
workflow's sandbox starts on first use (most runs never need one) and is closed by the workflow's
`close()`.

Model-written tests (`model_tests_program`). The sandbox's checker process, which holds the verdict
pipe and its nonce, must only ever execute trusted text: a test executed there could walk frames to
the harness, write forged records or patch the builtins the other tests use. So the host parses each
tester `assert` with `ast` and sorts it:

- **checked**: the plain shapes of HumanEval/MBPP-style tests, built only from literals (decoded here by
  `ast.literal_eval`), calls of the program's functions and methods (`f(1, [2])`, `Solution().m("x")`,
  `f(g(1))`; never of a builtin or of an attribute of a bare name), a few pure builtins on them
  (`abs len sorted set round isinstance math.isclose ...`), arithmetic, comparisons, `not`/`and`/`or`
  and subscripts, e.g. `assert f(x) == y`, `assert f(x) is None`, `assert not f(x)`,
  `assert abs(f(x) - y) < 1e-6`. The host writes the test
  the checker runs itself, from the decoded values: every builtin as `__builtins__.<name>` (a name the
  program cannot shadow: program globals whose names start with "__" never reach the checker), every
  call of the program a round trip that returns plain data. The verdict is the checker's own.
- **untrusted**: anything else (comprehensions, lambdas, variables, `str.format`, ...). It runs in
  the program's own process (which holds no nonce and no pipe to the host), wrapped in a function
  `_atgrpo_model_test_<i>` appended to the program; the checker only calls that function. Its verdict
  can be forged, but only its own: by the tester itself (as `assert True` always could) or by the
  program under test (e.g. an object that claims to equal everything). These run after every
  checked test of the program, so nothing they do in the program's process (rebinding the program's
  functions, patching its builtins) reaches a checked verdict; the caller maps results back with
  the returned order.

What that means for rewards (code workflow): no reward reads a tester verdict against the coder's
program (team and coder local come from the ground-truth tests, which run in a program of their own);
those verdicts decide `agree` (the episode ends) and the mismatches shown in prompts, so a forged
untrusted verdict can end an episode early or hide a mismatch, never raise a reward. The tester's
local reward counts its tests that the reference solution passes; an untrusted test can pass itself
there, which gains nothing over writing `assert True`.
"""

from __future__ import annotations

import ast
import builtins
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from atgrpo.config import RunConfig
from atgrpo.sandbox import Program, function_program, stdio_program

if TYPE_CHECKING:
    from atgrpo.sandbox import Sandbox

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def extract_code(text: str) -> str:
    """The program in a model answer: the last ```python block, else the last fenced block (an
    unclosed last fence runs to the end), else the whole text."""
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    if blocks:
        python = [b for lang, b in blocks if lang in ("python", "py", "python3")]
        return (python or [b for _, b in blocks])[-1].strip("\n").rstrip()
    return text.strip("\n").rstrip()


def compiles(code: str) -> bool:
    """Non-empty and valid Python syntax (compiled, never run)."""
    if not code.strip():
        return False
    try:
        compile(code, "<candidate>", "exec", dont_inherit=True)
    except Exception:  # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return False
    return True


class LazySandbox:
    """A workflow's sandbox, started on first use and closed by `close()` (idempotent)."""

    def __init__(self, cfg: RunConfig) -> None:
        self.timeout_s = cfg.task.sandbox_timeout_s
        self._sandbox: Sandbox | None = None

    def get(self) -> "Sandbox":
        if self._sandbox is None:
            from atgrpo.sandbox import Sandbox, SandboxIsolationWarning

            t = self.timeout_s
            with warnings.catch_warnings():  # the sandbox logs reduced isolation itself
                warnings.simplefilter("ignore", SandboxIsolationWarning)
                self._sandbox = Sandbox(workers=2, timeout_s=t, program_timeout_s=max(30.0, 4 * t))
        return self._sandbox

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None


@dataclass(frozen=True)
class PrintedOutput:
    """What one answer's program did when run with no input."""

    code: str
    """The extracted program."""
    verdict: str | None
    """The sandbox verdict ("passed": it ran to the end); None when it does not compile (never run)."""
    detail: str
    stdout: bytes

    @property
    def ran(self) -> bool:
        return self.verdict == "passed"

    @property
    def text(self) -> str:
        """Its standard output, decoded leniently."""
        return self.stdout.decode("utf-8", "replace")


def run_printing_programs(sandbox: LazySandbox, texts: Sequence[str]) -> list[PrintedOutput]:
    """Extract each answer's program and run those that compile, in one sandbox batch; one result per
    answer, in order. Nothing is started when no program compiles.

    Cached by program text: answers whose extracted programs are the same text share one run and its
    result (a program reads no input, so the text is the whole run), and different texts never share
    one. The cache lives for this call (the batch of one turn); a program whose output is not a
    function of its text (it reads the clock, draws at random) gives all its copies one draw."""
    codes = [extract_code(t) for t in texts]
    distinct = [c for c in dict.fromkeys(codes) if compiles(c)]
    runs = sandbox.get().run_batch([stdio_program(c, [("", None)]) for c in distinct]) if distinct else []
    by_code = {c: r.tests[0] for c, r in zip(distinct, runs)}
    return [
        PrintedOutput(code, by_code[code].verdict, by_code[code].detail, by_code[code].stdout)
        if code in by_code
        else PrintedOutput(code, None, "", b"")
        for code in codes
    ]


# -- model-written assert tests (module docstring) -------------------------------------------------

UNTRUSTED_TEST = "_atgrpo_model_test_{}"
"""Name of the function, appended to the program, that runs untrusted test `i` in the program's process."""
_PURE = frozenset(
    "abs all any bool bytes complex dict float frozenset int isinstance len list max min range round set sorted str sum tuple".split()
)
"""Builtins a checked test may use (called or passed, e.g. `key=len`): pure functions of plain data. A
program's value that is not plain data is a stand-in whose every protocol method raises."""
_MATH = frozenset("isclose isfinite isinf isnan fabs sqrt floor ceil inf nan pi e".split())
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%"}
_CMPOPS = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}  # fmt: skip
_BUILTIN_NAMES = frozenset(dir(builtins))
_MAX_DEPTH = 60


class _Untrusted(Exception):
    """The test is not of a shape the checker may run (it goes to the program's process)."""


def _literal(v: Any, depth: int = 0) -> str:
    """Source for a value `ast.literal_eval` gave, naming no global at all (inf, nan, complex and the
    empty set through `__builtins__`); a value the call channel cannot carry (Ellipsis) is refused."""
    if depth > _MAX_DEPTH:
        raise _Untrusted("nested too deep")
    t = type(v)
    if v is None or t is bool:
        return repr(v)
    if t is int:
        return f"({v!r})"
    if t is float:
        return f"({v!r})" if math.isfinite(v) else f"__builtins__.float({repr(v)!r})"
    if t is complex:
        return f"__builtins__.complex({_literal(v.real)}, {_literal(v.imag)})"
    if t is str or t is bytes:
        return repr(v)
    if t is tuple or t is list or t is set:
        items = [_literal(x, depth + 1) for x in v]
        if t is list:
            return "[" + ", ".join(items) + "]"
        if t is set:
            return "{" + ", ".join(items) + "}" if items else "__builtins__.set()"
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if t is dict:
        return "{" + ", ".join(f"{_literal(k, depth + 1)}: {_literal(x, depth + 1)}" for k, x in v.items()) + "}"
    raise _Untrusted(f"a {t.__name__} literal")


def _public(name: str) -> bool:
    return name.isidentifier() and not name.startswith("_")


def _args(node: ast.Call, depth: int) -> str:
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise _Untrusted("*args or **kwargs")
    parts = [_expr(a, depth + 1) for a in node.args]
    parts += [f"{k.arg}={_expr(k.value, depth + 1)}" for k in node.keywords if _public(k.arg or "")]
    if len(parts) != len(node.args) + len(node.keywords):
        raise _Untrusted("a private keyword")
    return ", ".join(parts)


def _expr(node: ast.expr, depth: int) -> str:
    """Checker source for one expression of a test. Every value it computes is plain data (literals,
    pure builtins of plain data, what a call of the program returns) or a stand-in for an object of the
    program (whose every protocol method raises), so the checker's own operators decide."""
    if depth > _MAX_DEPTH:
        raise _Untrusted("nested too deep")
    if not isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Compare, ast.BoolOp)):
        try:
            value = ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
        else:
            return _literal(value)
    if isinstance(node, ast.Compare) and all(type(op) in _CMPOPS for op in node.ops):
        parts = [_expr(node.left, depth + 1)]
        for op, right in zip(node.ops, node.comparators):
            parts += [_CMPOPS[type(op)], _expr(right, depth + 1)]
        return "(" + " ".join(parts) + ")"
    if isinstance(node, ast.BoolOp):
        word = " and " if isinstance(node.op, ast.And) else " or "
        return "(" + word.join(_expr(v, depth + 1) for v in node.values) + ")"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
        sign = {ast.Not: "not ", ast.USub: "-", ast.UAdd: "+"}[type(node.op)]
        return f"({sign}{_expr(node.operand, depth + 1)})"
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return f"({_expr(node.left, depth + 1)} {_BINOPS[type(node.op)]} {_expr(node.right, depth + 1)})"
    if isinstance(node, (ast.Tuple, ast.List)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise _Untrusted("a starred item")
        items = [_expr(e, depth + 1) for e in node.elts]
        if isinstance(node, ast.List):
            return "[" + ", ".join(items) + "]"
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(node, ast.Subscript):
        sl = node.slice
        if isinstance(sl, ast.Slice):
            index = ":".join("" if x is None else _expr(x, depth + 1) for x in (sl.lower, sl.upper, sl.step))
        else:
            index = _expr(sl, depth + 1)
        return f"({_expr(node.value, depth + 1)}[{index}])"
    if isinstance(node, ast.Name) and node.id in _PURE:
        return f"__builtins__.{node.id}"
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "math"
        and node.attr in _MATH
    ):
        return f"__builtins__.__import__('math').{node.attr}"
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in _PURE:
            return f"__builtins__.{func.id}({_args(node, depth)})"
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "math"
            and func.attr in _MATH
        ):
            return f"__builtins__.__import__('math').{func.attr}({_args(node, depth)})"
        if isinstance(func, ast.Name) and _public(func.id) and func.id not in _BUILTIN_NAMES:
            # A function of the program: in the checker, whatever the program's listing installed
            # under that name (a stand-in, a plain value, a standard data class, a module) or the
            # trusted setup's; never a builtin (`exec`), as builtin names are refused here.
            return f"{func.id}({_args(node, depth)})"
        if isinstance(func, ast.Attribute) and _public(func.attr) and func.attr not in ("format", "format_map"):
            # A method of a value the test made (`Solution().m(1)`, `f(x).count(2)`): never of a bare
            # name, which could be a module the program lists (`os.system`).
            if isinstance(func.value, ast.Name):
                raise _Untrusted("a method of a bare name")
            return f"({_expr(func.value, depth + 1)}).{func.attr}({_args(node, depth)})"
    raise _Untrusted(type(node).__name__)


def checked_test(test: str) -> str | None:
    """The checker's own text for a model-written `assert`, or None when the test is not of the
    restricted shape (module docstring). A literal message is kept, any other one dropped."""
    try:
        tree = ast.parse(test)
        if len(tree.body) != 1 or not isinstance(node := tree.body[0], ast.Assert):
            return None
        out = f"assert {_expr(node.test, 0)}"
        if node.msg is not None:
            try:
                out += f", {_literal(ast.literal_eval(node.msg))}"
            except (_Untrusted, ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass
        compile(out, "<test>", "exec", dont_inherit=True)
    except Exception:  # _Untrusted, and whatever text the parser refuses: the untrusted path is always safe
        return None
    return out


def model_tests_program(code: str, tests: Sequence[str], setup: str = "") -> tuple[Program, tuple[int, ...]]:
    """`code` against model-written asserts: the program, and for each of its results the index in
    `tests` of the test it belongs to (checked tests first, then the untrusted ones; module
    docstring). `setup` is trusted (the problem's own) and runs in the checker as for any program."""
    checked: list[str] = []
    order: list[int] = []
    wrappers: list[str] = []
    for i, test in enumerate(tests):
        if (text := checked_test(test)) is not None:
            checked.append(text)
            order.append(i)
    for i, test in enumerate(tests):
        if i in order:
            continue
        name = UNTRUSTED_TEST.format(i)
        wrappers.append(
            f"def {name}():\n"
            f"    __builtins__.exec(__builtins__.compile({test!r}, '<test {i}>', 'exec', dont_inherit=True), __builtins__.globals())\n"
        )
        checked.append(f"{name}()")
        order.append(i)
    program = code + "\n\n\n" + "\n\n".join(wrappers) if wrappers else code
    return function_program(program, checked, setup), tuple(order)


def in_test_order(results: Sequence[Any], order: Sequence[int]) -> list[Any]:
    """Per-test results of a `model_tests_program`, back in the order of its `tests`."""
    out: list[Any] = [None] * len(order)
    for i, r in zip(order, results):
        out[i] = r
    return [r for r in out if r is not None]


__all__ = [
    "LazySandbox",
    "PrintedOutput",
    "checked_test",
    "compiles",
    "extract_code",
    "in_test_order",
    "model_tests_program",
    "run_printing_programs",
]
