"""Math workflow: tool agents, reasoners and an optional judge (python/atgrpo/ALGORITHM.md, "Workflows"
and "Teams"). Turn loop: `tree.py`. The team is `task.agents()`: by default one tool agent and one reasoner;
`task.team` gives N reasoners, M tool agents and a judge.

- A **tool agent** writes a Python program (code extracted as in the code workflow) that prints the
  answer; it runs in the sandbox with no input, and the last non-empty line of its stdout is its answer.
- A **reasoner** reasons in text and gives `\\boxed{...}`; its answer is extracted by
  `atgrpo.verify.extract_answer` (boxed first, then the other documented rules).
- The **judge** acts last in each turn. It sees every agent's latest answer (a tool agent's program and
  output too, in the paper prompts) and gives the team's answer, extracted as the reasoner's.
Later turns show every agent all the latest answers (`team_lines`).

Rewards (r = alpha * team + local), checked with `atgrpo.verify` (Math-Verify with a latency cap):
- team = the team's answer is correct. The team's answer is the judge's latest; before the judge has
  answered (or without one), the latest answer of the last reasoner in turn order that has answered,
  else of the last tool agent: for one tool agent and one reasoner, the reasoner's, or the tool
  agent's while the reasoner has none (so in a tool-only team it is the tool agent's).
- local, tool agents and reasoners = (format + correct) / 2 of the agent's own answer: format is a
  `\\boxed{}` answer for a reasoner and a program that ran and printed an answer for a tool agent.
- local, judge = 1 if an agent's answer on the table was correct and the judge's answer is correct,
  else 0 (it picked a correct answer when there was one to pick; with none on the table only the team
  reward tells its candidates apart).
Done (without a judge) after any agent's step once every tool agent and reasoner has answered and all
their answers agree; with a judge, only after the judge's step, on the same condition (so the judge
gives one answer per turn, and turns go on while the agents disagree); at the latest after `turns`
turns. A single agent is single turn. Success = the team's final answer is correct.
Program output is only ever compared as text, never evaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Sequence

from atgrpo.config import JUDGE, RunConfig
from atgrpo.data import MathProblem, load_math_problems
from atgrpo.verify import MathVerifier, default_verifier, extract_answer, last_boxed
from atgrpo.workflows.math_team import TeamText
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
class Answer:
    """One agent's latest answer."""

    text: str
    """The answer; '' when the agent gave nothing usable."""
    correct: bool
    code: str | None = None
    """Tool agents: the program."""
    output: str = ""
    """Tool agents: what the program printed (or why it did not run), clipped."""


@dataclass(frozen=True)
class MathState:
    answers: tuple[Answer | None, ...] = ()
    """The latest answer of each agent of `task.agents()`, in turn order; None before it has acted."""
    agree: bool = False
    """Every tool agent and reasoner has answered and their answers agree."""


@lru_cache(maxsize=None)
def load_math_templates(style: str) -> dict[str, str]:
    return read_templates("math", style, (TOOL, REASONER, JUDGE, "feedback"))


class MathWorkflow(TextWorkflow[MathState]):
    task = "math"
    load_problems = staticmethod(load_math_problems)

    def __init__(
        self,
        cfg: RunConfig,
        problems: dict[str, Sequence[MathProblem]] | None = None,
        verifier: MathVerifier | None = None,
    ) -> None:
        super().__init__(cfg, problems)
        self.templates = load_math_templates(cfg.task.prompts)
        self._verifier = verifier
        self.team = TeamText(self.agents, paper=cfg.task.prompts == "paper")
        self.index = {a.name: i for i, a in enumerate(self.agents)}
        self.answering = [i for i, a in enumerate(self.agents) if a.role != JUDGE]
        self.judge = next((i for i, a in enumerate(self.agents) if a.role == JUDGE), None)
        # The team's answer: the judge's, else the last reasoner's, else the last tool agent's.
        rank = {JUDGE: 0, REASONER: 1, TOOL: 2}
        self.precedence = sorted(range(len(self.agents)), key=lambda i: (rank[self.agents[i].role], -i))

    @property
    def verifier(self) -> MathVerifier:
        return self._verifier or default_verifier()

    def initial_state(self, problem: MathProblem) -> MathState:
        return MathState(answers=(None,) * len(self.agents))

    def team_answer(self, state: MathState) -> Answer | None:
        """The answer the team gives in `state` (see the module docstring)."""
        return next((a for a in (state.answers[i] for i in self.precedence) if a is not None), None)

    def prompt_text(self, name: str, problem: MathProblem, state: MathState, turn: int) -> str:
        agent = self.agents[self.index[name]]
        lines = "\n".join(self.team.lines(state.answers, clip))
        question = problem.question.strip()
        if agent.role == JUDGE:
            return self.templates[JUDGE].format(
                question=question, answers=lines, turn=turn + 1, turns=self.turns, team=self.team.team
            )
        feedback = self.templates["feedback"].format(answers=lines, agreement=self.team.agreement) if lines else ""
        return self.templates[agent.role].format(
            question=question,
            feedback=feedback,
            turn=turn + 1,
            turns=self.turns,
            agent=self.team.you(agent),
            team=self.team.team,
        )

    def _answers(self, role: str, items: list[tuple[MathProblem, MathState, str]]) -> tuple[list[Answer], list[bool]]:
        """Each candidate's answer (not yet checked) and whether it has the role's format."""
        answers, formats = [], []
        if role == TOOL:
            for run in run_printing_programs(self._sandbox, [text for _, _, text in items]):
                if run.verdict is None:
                    output, answer = "(does not compile)", ""
                else:
                    output = run.text if run.ran else f"{run.verdict}: {run.detail}"
                    answer = program_answer(run.stdout) if run.ran else ""
                answers.append(Answer(answer, False, code=run.code, output=clip(output, 1000)))
                formats.append(bool(answer))
        else:
            for _, _, text in items:
                found = extract_answer(text)
                answers.append(Answer(found.text[:ANSWER_CHARS] if found else "", False))
                formats.append(last_boxed(text) is not None)
        return answers, formats

    def _agreement(self, states: list[MathState]) -> list[bool]:
        """Whether every tool agent and reasoner has an answer and all agree with the first one's."""
        first, others = self.answering[0], self.answering[1:]
        pairs: list[tuple[int, str, str]] = []
        complete = [all(s.answers[i] is not None and s.answers[i].text for i in self.answering) for s in states]  # type: ignore[union-attr]
        for n, (s, whole) in enumerate(zip(states, complete)):
            if whole:
                pairs += [(n, s.answers[first].text, s.answers[i].text) for i in others]  # type: ignore[union-attr]
        verdicts = (
            self.verifier.verify_batch([a for _, a, _ in pairs], [b for _, _, b in pairs], extract=False)
            if pairs
            else []
        )
        agree = list(complete)
        for (n, _, _), v in zip(pairs, verdicts):
            agree[n] = agree[n] and bool(v.correct)
        return agree

    def apply(self, name: str, items: list[tuple[MathProblem, MathState, str]]) -> list[Outcome[MathState]]:
        me = self.index[name]
        role = self.agents[me].role
        single = len(self.agents) == 1
        answers, formats = self._answers(role, items)
        verdicts = self.verifier.verify_batch([a.text for a in answers], [p.answer for p, _, _ in items], extract=False)
        new_states = []
        for (_, st, _), a, v in zip(items, answers, verdicts):
            checked = replace(a, correct=bool(v.correct))
            new_states.append(replace(st, answers=st.answers[:me] + (checked,) + st.answers[me + 1 :]))
        agree = self._agreement(new_states)
        out = []
        for (_, before, _), st, fmt, ok in zip(items, new_states, formats, agree):
            st = replace(st, agree=ok)
            mine = st.answers[me]
            assert mine is not None
            final = self.team_answer(st)
            final_correct = final is not None and final.correct
            if role == JUDGE:
                on_table = any(x is not None and x.correct for i, x in enumerate(before.answers) if i != me)
                local, done = float(on_table and mine.correct), ok
            else:
                local, done = (float(fmt) + float(mine.correct)) / 2.0, single or (ok and self.judge is None)
            out.append(Outcome(st, float(final_correct), local, done, final_correct))
        return out

    def describe(self, name: str, state: MathState) -> dict[str, object]:
        """What `name` answered in `state` and the team's answer then (for transcripts)."""
        mine = state.answers[self.index[name]]
        final = self.team_answer(state)
        row: dict[str, object] = {
            "answer": None if mine is None else mine.text,
            "correct": mine is not None and mine.correct,
        }
        if mine is not None and mine.code is not None:
            row.update(program=mine.code, output=mine.output)
        row.update(team_answer=None if final is None else final.text, agree=state.agree)
        return row
