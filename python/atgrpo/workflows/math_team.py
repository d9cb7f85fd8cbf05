"""What the math team's prompts say about the team: who is speaking, who the team is, and every agent's
latest answer (`TeamText`).

For a team without a judge and with one agent per role (the default, tool agent + reasoner), every text
is the one the math prompts have always had ("Tool agent's answer: ...", "a two-agent team (a tool
agent and a reasoner)", "both agents agree"), so those prompts are unchanged. Agents of a role with
several instances are numbered from 1 ("Reasoner 2's answer"). Answers are listed tool agents first,
then reasoners, then the judge, each role's agents in order; what an agent is shown of another's output
is clipped by the caller's `clip`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Protocol

from atgrpo.config import JUDGE, Agent
from atgrpo.workflows.prompts import FEEDBACK_CHARS

TOOL, REASONER = "tool", "reasoner"
LABEL = {TOOL: "Tool agent", REASONER: "Reasoner", JUDGE: "Judge"}
NOUN = {TOOL: ("tool agent", "tool agents"), REASONER: ("reasoner", "reasoners")}
ORDER = {TOOL: 0, REASONER: 1, JUDGE: 2}
OUTPUT_CHARS = 500
"""A tool agent's output as others are shown it (its program: `FEEDBACK_CHARS`)."""


class Shown(Protocol):
    """What the team text reads of one agent's answer (`math.Answer`)."""

    @property
    def text(self) -> str: ...
    @property
    def code(self) -> str | None: ...
    @property
    def output(self) -> str: ...


class TeamText:
    """The team's wording for one `task.agents()` list."""

    def __init__(self, agents: Sequence[Agent], paper: bool) -> None:
        self.agents = list(agents)
        self.paper = paper
        self.counts = Counter(a.role for a in self.agents)
        self.legacy = JUDGE not in self.counts and all(n == 1 for n in self.counts.values())
        answering = sum(n for r, n in self.counts.items() if r != JUDGE)
        if self.legacy:
            self.team = "a two-agent team (a tool agent and a reasoner)"
            self.agreement = "both agents agree"
        else:
            parts = [
                "a judge" if r == JUDGE else f"{self.counts[r]} {NOUN[r][self.counts[r] > 1]}"
                for r in dict.fromkeys(a.role for a in self.agents)
            ]
            self.team = "a team of " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0])
            self.agreement = (
                f"the answers of all {answering} tool agents and reasoners agree"
                if answering > 1
                else "the judge has answered"
            )
        self.listed = sorted(range(len(self.agents)), key=lambda i: (ORDER[self.agents[i].role], i))

    def label(self, agent: Agent) -> str:
        """How others name the agent: "Tool agent", "Reasoner 2", "Judge"."""
        base = LABEL[agent.role]
        return base if self.counts[agent.role] == 1 else f"{base} {agent.index + 1}"

    def you(self, agent: Agent) -> str:
        """How the agent's own prompt names it: "the reasoner", "reasoner 2"."""
        noun = NOUN[agent.role][0] if agent.role != JUDGE else "judge"
        return f"the {noun}" if self.counts[agent.role] == 1 else f"{noun} {agent.index + 1}"

    def lines(self, answers: Sequence[Shown | None], clip: Callable[[str, int], str]) -> list[str]:
        """Every agent's latest answer (and, in the paper prompts, a tool agent's program and output)."""
        out = []
        for i in self.listed:
            a = answers[i]
            if a is None:
                continue
            label = self.label(self.agents[i])
            if self.paper and a.code is not None:
                out.append(f"{label}'s program:\n```python\n{clip(a.code, FEEDBACK_CHARS)}\n```")
                out.append(f"Its output:\n{clip(a.output, OUTPUT_CHARS) or '(nothing)'}")
            out.append(f"{label}'s answer: {a.text or '(none)'}")
        return out
