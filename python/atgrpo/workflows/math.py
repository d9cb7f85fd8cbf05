"""Math workflow: a tool agent and a reasoner (python/atgrpo/ALGORITHM.md, "Workflows"). Turn loop: `tree.py`.

- The **tool agent** writes a Python program (code extracted as in the code workflow) that prints the
  answer; it runs in the sandbox with no input, and the last non-empty line of its stdout is its answer.
- The **reasoner** reasons in text and gives `\\boxed{...}`; its answer is extracted by
  `atgrpo.verify.extract_answer` (boxed first, then the other documented rules).
Later turns show each agent the other's latest answer (and the tool agent's program and output).

Rewards (r = alpha * team + local), checked with `atgrpo.verify` (Math-Verify with a latency cap):
- team = the team's final answer is correct: the reasoner's latest answer, or the tool agent's while
  the reasoner has none (so in a tool-only team it is the tool agent's).
- local = (format + correct) / 2 for both agents: format is a `\\boxed{}` answer for the reasoner and a
  program that ran and printed an answer for the tool agent (the algorithm names the reasoner's; the
  tool agent's mirrors it).
Done when both agents have answered and their answers agree, or after `turns` turns; a single-agent
team (one role) is single turn. Success = the final answer is correct.
Program output is only ever compared as text, never evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Sequence

from atgrpo.config import RunConfig
from atgrpo.data import MathProblem, load_math_problems
from atgrpo.verify import MathVerifier, default_verifier, extract_answer, last_boxed
from atgrpo.workflows.programs import run_printing_programs
from atgrpo.workflows.prompts import clip, read_templates
from atgrpo.workflows.states import Outcome, TextWorkflow

TOOL, REASONER = "tool", "reasoner"
ANSWER_CHARS = 200
"""Answers longer than this are cut before checking and showing (a printed wall of text is no answer)."""


def program_answer(stdout: bytes) -> str:
    """The last non-empty line of a program's output (decoded leniently), or ''."""
    lines = [ln.strip() for ln in stdout.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:ANSWER_CHARS] if lines else ""


@dataclass(frozen=True)
class MathState:
    tool_code: str | None = None
    tool_output: str = ""
    tool_answer: str | None = None
    """None before the tool agent has acted; '' when its program printed nothing usable."""
    reasoner_answer: str | None = None
    tool_correct: bool = False
    reasoner_correct: bool = False
    agree: bool = False

    @property
    def final_correct(self) -> bool:
        return self.reasoner_correct if self.reasoner_answer is not None else self.tool_correct


@lru_cache(maxsize=None)
def load_math_templates(style: str) -> dict[str, str]:
    return read_templates("math", style, (TOOL, REASONER, "feedback"))


class MathWorkflow(TextWorkflow[MathState]):
    task = "math"
    load_problems = staticmethod(load_math_problems)

    def __init__(
        self, cfg: RunConfig, problems: dict[str, Sequence[MathProblem]] | None = None, verifier: MathVerifier | None = None
    ) -> None:
        super().__init__(cfg, problems)
        self.templates = load_math_templates(cfg.task.prompts)
        self._verifier = verifier

    @property
    def verifier(self) -> MathVerifier:
        return self._verifier or default_verifier()

    def initial_state(self, problem: MathProblem) -> MathState:
        return MathState()

    def prompt_text(self, role: str, problem: MathProblem, state: MathState, turn: int) -> str:
        lines = []
        if state.tool_code is not None:
            if self.cfg.task.prompts == "paper":
                lines.append(f"Tool agent's program:\n```python\n{clip(state.tool_code)}\n```")
                lines.append(f"Its output:\n{clip(state.tool_output, 500) or '(nothing)'}")
            lines.append(f"Tool agent's answer: {state.tool_answer or '(none)'}")
        if state.reasoner_answer is not None:
            lines.append(f"Reasoner's answer: {state.reasoner_answer or '(none)'}")
        feedback = self.templates["feedback"].format(answers="\n".join(lines)) if lines else ""
        return self.templates[role].format(question=problem.question.strip(), feedback=feedback, turn=turn + 1, turns=self.turns)

    def apply(self, role: str, items: list[tuple[MathProblem, MathState, str]]) -> list[Outcome[MathState]]:
        single = len(self.roles) == 1
        new_states: list[MathState] = []
        formats: list[bool] = []
        if role == TOOL:
            for (_, st, _), run in zip(items, run_printing_programs(self._sandbox, [text for _, _, text in items])):
                if run.verdict is None:
                    output, answer = "(does not compile)", ""
                else:
                    output = run.text if run.ran else f"{run.verdict}: {run.detail}"
                    answer = program_answer(run.stdout) if run.ran else ""
                new_states.append(replace(st, tool_code=run.code, tool_output=clip(output, 1000), tool_answer=answer))
                formats.append(bool(answer))
            mine = [s.tool_answer or "" for s in new_states]
        else:
            for _, st, text in items:
                found = extract_answer(text)
                answer = found.text[:ANSWER_CHARS] if found else ""
                new_states.append(replace(st, reasoner_answer=answer))
                formats.append(last_boxed(text) is not None)
            mine = [s.reasoner_answer or "" for s in new_states]
        verdicts = self.verifier.verify_batch(mine, [p.answer for p, _, _ in items], extract=False)
        # Agreement between the two agents' answers (only where both have one).
        pairs = [(i, s.tool_answer, s.reasoner_answer) for i, s in enumerate(new_states) if s.tool_answer and s.reasoner_answer]
        agree_v = self.verifier.verify_batch([a for _, a, _ in pairs], [b for _, _, b in pairs], extract=False) if pairs else []
        agree = {i: v.correct for (i, _, _), v in zip(pairs, agree_v)}
        out = []
        for i, (st, fmt, v) in enumerate(zip(new_states, formats, verdicts)):
            correct = bool(v.correct)
            st = replace(st, agree=agree.get(i, False))
            st = replace(st, tool_correct=correct) if role == TOOL else replace(st, reasoner_correct=correct)
            local = (float(fmt) + float(correct)) / 2.0
            out.append(Outcome(st, float(st.final_correct), local, single or st.agree, st.final_correct))
        return out
