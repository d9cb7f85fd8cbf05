"""Code workflow: a coder and a tester (python/atgrpo/ALGORITHM.md, "Workflows"). Turn loop: `tree.py`.

Per turn, in `roles` order:

- The **coder** writes a program (the last ```python block of its answer, else any fenced block, else
  the raw text; a function-style answer that only gives the body of `starter_code` gets the stub
  prepended). It is run in the sandbox against the problem's ground-truth tests and against the
  tester's latest tests.
- The **tester** writes tests: `assert` statements for function-style problems, `Input:`/`Output:`
  fenced block pairs for stdin/stdout problems. They are run against the reference solution (their
  validity) and the coder's latest program.

Rewards (r = alpha * team + local):
- team = pass rate of the coder's current program on the ground-truth tests (for the tester's
  candidates this is the program it is testing, so the same for all of them).
- coder local = (compiles + runs without error on every ground-truth test + passes them all) / 3.
- tester local = fraction of its tests the reference solution passes (they are valid and agree with
  a golden solution); without a reference, 1 if it wrote at least one parseable test; 0 with none.
Done when the coder's program passes every one of the tester's (at least one) tests, or after
`turns` turns. The single-agent baseline (`roles = ["coder"]`) is single turn: done after the coder.
Success = the final program passes all ground-truth tests. Each agent's prompt after the first
exchange shows the other's latest output and the mismatches between the two (`feedback.txt`).

Model text is never executed on the host: programs and tests run only in the sandbox; the host only
`compile`s / `ast.parse`s them. A sandbox verdict (timeout, memory, crash) is just a failed test.

Who can forge what. The ground-truth tests are trusted and run in the sandbox's checker, so the coder's
program cannot forge their verdicts. The tester's asserts are not trusted: they never run in the
checker as written (`programs.model_tests_program`). Those of the plain shapes (`assert f(1) == 2`,
`abs(f(x) - y) < tol`, ...) are rewritten by the host from their decoded literals and judged by the
checker; the rest run in the program's own process, where only their own verdict can be forged (by
the tester, or by the coder's program). No reward reads a tester verdict against the coder's program:
those decide `agree` and the mismatches only. The tester's validity reward reads its verdicts against
the reference, where an untrusted test can pass itself, as `assert True` always could.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Sequence

from atgrpo.config import RunConfig
from atgrpo.data import CodeProblem, IOCase, load_code_problems
from atgrpo.sandbox import Program, function_program, stdio_program
from atgrpo.workflows.programs import compiles, extract_code, in_test_order, model_tests_program
from atgrpo.workflows.prompts import COMPACT_CHARS, FEEDBACK_CHARS, clip, read_templates
from atgrpo.workflows.states import Outcome, TextWorkflow

CODER, TESTER = "coder", "tester"
MAX_TESTS = 8
"""At most this many of the tester's tests are run (the first ones)."""
MAX_TEST_CHARS = 2000
MAX_MISMATCHES = 5
ERROR_VERDICTS = {"runtime_error", "timeout", "memory_limit", "output_limit", "sandbox_error", "skipped"}

_CLOSED_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)


def solution_code(text: str, problem: CodeProblem) -> str:
    code = extract_code(text)
    if problem.style == "function" and problem.starter_code and problem.entry_point:
        if not re.search(rf"\bdef\s+{re.escape(problem.entry_point)}\b|\bclass\s+Solution\b", code):
            body = code if code.startswith((" ", "\t")) else "\n".join("    " + ln for ln in code.splitlines())
            code = problem.starter_code.rstrip("\n") + "\n" + body
    return code


def parse_assert_tests(text: str) -> tuple[str, ...]:
    """Top-level `assert` statements of the answer's code (line by line when it does not parse)."""
    code = extract_code(text)
    tests: list[str] = []
    try:
        tree = ast.parse(code)
        for node in tree.body:
            if isinstance(node, ast.Assert):
                seg = ast.get_source_segment(code, node)
                if seg:
                    tests.append(seg)
    except Exception:
        for line in code.splitlines():
            line = line.strip()
            if line.startswith("assert"):
                try:
                    ast.parse(line)
                except Exception:
                    continue
                tests.append(line)
    return tuple(t for t in tests if len(t) <= MAX_TEST_CHARS)[:MAX_TESTS]


def parse_io_tests(text: str) -> tuple[IOCase, ...]:
    """Stdin/stdout cases: a fenced block labelled "input" followed by one labelled "output" (the last
    of the two words in the text before a block is its label; "Expected output" is an output)."""
    cases: list[IOCase] = []
    pending: str | None = None
    last_end = 0
    for m in _CLOSED_FENCE.finditer(text):
        before = text[last_end : m.start()].lower()
        last_end = m.end()
        i, o = before.rfind("input"), before.rfind("output")
        if i > o:
            pending = m.group(1)
        elif o > i and pending is not None:
            if len(pending) + len(m.group(1)) <= MAX_TEST_CHARS:
                cases.append(IOCase(pending, m.group(1)))
            pending = None
    return tuple(cases[:MAX_TESTS])


def format_tests(problem: CodeProblem, tests: tuple) -> str:
    if not tests:
        return "(none)"
    if problem.style == "function":
        return "\n".join(tests)
    return "\n".join(f"Input:\n```\n{c.input.rstrip()}\n```\nOutput:\n```\n{c.output.rstrip()}\n```" for c in tests)


@dataclass(frozen=True)
class CodeState:
    code: str | None = None
    """The coder's latest program (None before it has written one)."""
    tests: tuple = ()
    """The tester's latest tests: assert statements (function style) or `IOCase`s (stdio)."""
    gt_rate: float = 0.0
    """Pass rate of `code` on the ground-truth tests."""
    gt_pass: bool = False
    mismatches: tuple[str, ...] = ()
    """How `code` failed `tests` (shown to both agents)."""
    agree: bool = False
    """`code` passes every one of `tests` (and there is at least one)."""


@lru_cache(maxsize=None)
def load_code_templates(style: str) -> dict[str, str]:
    return read_templates("code", style, (CODER, TESTER, "feedback"))


class CodeWorkflow(TextWorkflow[CodeState]):
    task = "code"
    load_problems = staticmethod(load_code_problems)

    def __init__(self, cfg: RunConfig, problems: dict[str, Sequence[CodeProblem]] | None = None) -> None:
        super().__init__(cfg, problems)
        self.templates = load_code_templates(cfg.task.prompts)

    # -- programs ---------------------------------------------------------------------------------
    def _ground_truth(self, problem: CodeProblem, code: str) -> Program:
        prog = problem.program(code)
        if problem.style == "function":
            return function_program(prog, problem.tests, problem.test_setup)
        return stdio_program(prog, [(c.input, c.output) for c in problem.cases])

    def _against(self, problem: CodeProblem, code: str, tests: tuple) -> tuple[Program, tuple[int, ...]]:
        """The program against the tester's tests, and for each result the index of its test."""
        prog = problem.program(code)
        if problem.style == "function":
            return model_tests_program(prog, tests, problem.test_setup)
        return stdio_program(prog, [(c.input, c.output) for c in tests]), tuple(range(len(tests)))

    @staticmethod
    def _mismatches(problem: CodeProblem, tests: tuple, results: list) -> tuple[tuple[str, ...], bool]:
        out = []
        for test, tr in zip(tests, results):
            if tr.verdict == "passed":
                continue
            why = tr.detail or tr.verdict
            if problem.style == "function":
                out.append(f"{test}  -> {tr.verdict}: {clip(why, 200)}")
            else:
                got = tr.stdout.decode("utf-8", "replace")
                out.append(
                    f"input {clip(test.input, 200)!r}: expected {clip(test.output, 200)!r}, got {clip(got, 200)!r} ({tr.verdict})"
                )
        return tuple(out[:MAX_MISMATCHES]), bool(tests) and not out and len(results) == len(tests)

    # -- prompts ----------------------------------------------------------------------------------
    def prompt_text(self, role: str, problem: CodeProblem, state: CodeState, turn: int) -> str:
        feedback = ""
        lim = COMPACT_CHARS if self.cfg.task.prompts == "compact" else FEEDBACK_CHARS
        if state.code is not None or state.tests:
            feedback = self.templates["feedback"].format(
                code=clip(state.code or "(none yet)", lim),
                tests=clip(format_tests(problem, state.tests), lim),
                mismatches=clip("\n".join(state.mismatches) or ("none" if state.agree else "(not run yet)"), lim),
            )
        entry = problem.entry_point
        if role == CODER:
            fmt = (
                f"Define `{entry}` (the tests call it directly; do not read input)."
                if problem.style == "function"
                else "Read the input from standard input and print the answer to standard output."
            )
        elif problem.style == "function":
            fmt = f"Write 3 to 5 tests as Python assert statements calling `{entry}`, in one ```python code block."
        else:
            fmt = "Write 3 to 5 tests, each as\nInput:\n```\n<stdin>\n```\nOutput:\n```\n<expected stdout>\n```"
        starter = f"\nStarter code:\n```python\n{problem.starter_code.rstrip()}\n```\n" if problem.starter_code else ""
        if self.cfg.task.prompts == "compact":
            starter = problem.starter_code
        return self.templates[role].format(
            problem=problem.prompt.strip(),
            starter=starter,
            feedback=feedback,
            format=fmt,
            turn=turn + 1,
            turns=self.turns,
        )

    # -- transitions ------------------------------------------------------------------------------
    def apply(self, role: str, items: list[tuple[CodeProblem, CodeState, str]]) -> list[Outcome[CodeState]]:
        return self._apply_coder(items) if role == CODER else self._apply_tester(items)

    def _apply_coder(self, items) -> list[Outcome[CodeState]]:
        has_tester = TESTER in self.roles
        codes = [solution_code(text, p) for p, _, text in items]
        ok = [compiles(c) for c in codes]
        programs: list[Program] = []
        orders: dict[int, tuple[int, ...]] = {}
        slots: list[tuple[int | None, int | None]] = []
        for (p, st, _), code, good in zip(items, codes, ok):
            gt = vs = None
            if good:
                gt = len(programs)
                programs.append(self._ground_truth(p, code))
                if st.tests:
                    vs = len(programs)
                    prog, orders[vs] = self._against(p, code, st.tests)
                    programs.append(prog)
            slots.append((gt, vs))
        results = self.sandbox.run_batch(programs) if programs else []
        out = []
        for (p, st, _), code, good, (gt, vs) in zip(items, codes, ok, slots):
            if gt is None:
                rate, passed, runs = 0.0, False, False
            else:
                verdicts = results[gt].verdicts
                rate = sum(v == "passed" for v in verdicts) / max(1, len(verdicts))
                passed = bool(verdicts) and all(v == "passed" for v in verdicts)
                runs = not any(v in ERROR_VERDICTS for v in verdicts)
            if vs is not None:
                mism, agree = self._mismatches(p, st.tests, in_test_order(results[vs].tests, orders[vs]))
            else:
                mism, agree = (("the program does not compile",) if st.tests else ()), False
            new = replace(st, code=code, gt_rate=rate, gt_pass=passed, mismatches=mism, agree=agree)
            local = (float(good) + float(runs) + float(passed)) / 3.0
            out.append(Outcome(new, rate, local, agree or not has_tester, passed))
        return out

    def _apply_tester(self, items) -> list[Outcome[CodeState]]:
        parsed = [parse_assert_tests(text) if p.style == "function" else parse_io_tests(text) for p, _, text in items]
        programs: list[Program] = []
        orders: dict[int, tuple[int, ...]] = {}
        slots: list[tuple[int | None, int | None]] = []
        for (p, st, _), tests in zip(items, parsed):
            ref = vs = None
            if tests and p.reference:
                ref = len(programs)
                prog, orders[ref] = self._against(p, p.reference, tests)
                programs.append(prog)
            if tests and st.code is not None and compiles(st.code):
                vs = len(programs)
                prog, orders[vs] = self._against(p, st.code, tests)
                programs.append(prog)
            slots.append((ref, vs))
        results = self.sandbox.run_batch(programs) if programs else []
        out = []
        for (p, st, _), tests, (ref, vs) in zip(items, parsed, slots):
            if not tests:
                local = 0.0
            elif ref is None:
                local = 1.0
            else:
                local = sum(v == "passed" for v in results[ref].verdicts) / len(tests)
            if vs is not None:
                mism, agree = self._mismatches(p, tests, in_test_order(results[vs].tests, orders[vs]))
            else:
                mism, agree = (("the program does not compile",) if st.code is not None and tests else ()), False
            new = replace(st, tests=tests, mismatches=mism, agree=agree)
            out.append(Outcome(new, st.gt_rate, local, agree, st.gt_pass))
        return out

    def initial_state(self, problem: CodeProblem) -> CodeState:
        return CodeState()

    def describe(self, name: str, state: CodeState) -> dict[str, object]:
        """The team's program and tests in `state` (for transcripts): both agents' latest outputs."""
        tests = [t if isinstance(t, str) else {"input": t.input, "output": t.output} for t in state.tests]
        return {"program": state.code, "tests": tests, "pass_rate": state.gt_rate, "mismatches": list(state.mismatches)}
