"""`atgrpo-eval --transcripts PATH`: what the team said on each problem, one JSON object per line.

A `Recorder` is set as the workflow's `on_step` hook (`TreeWorkflow.on_step`) and keeps, for every env
and branch (an episode), each agent's turns in the order they were taken: the agent, the turn, the
text it answered with, and what the workflow reports of it (`describe`: the math workflow gives the
extracted answer, whether it is correct, a tool agent's program and output, the team's answer after
the step; the games give the observation the agent was shown). `records` joins them with the
episodes' verdicts:

    {"id": ..., "sample": 0, "question": ..., "gold": ..., "turns": [{"turn": 0, "agent": "reasoner_1",
     "text": ..., "answer": ..., ...}, ...], "final_answer": ..., "correct": true, "turns_used": 1}

Samples of one problem (`--samples n`) are the branches 0..n-1 of its env, each its own record. Nothing
in a transcript is read back by atgrpo; it is for people (and tools like those that read
lm-eval-harness or evalplus samples).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atgrpo.messages import EnvResult, WorkUnit


class Recorder:
    """Collects every agent's step of every episode (a `TreeWorkflow.on_step` hook)."""

    def __init__(self) -> None:
        self.steps: dict[tuple[int, int], list[dict[str, Any]]] = {}

    def __call__(
        self, unit: WorkUnit, agent: str, turn: int, live: list[tuple[int, int]], answers: list[str], states: Any
    ) -> None:
        describe = getattr(states, "describe", None)
        for (e, b), text in zip(live, answers):
            row: dict[str, Any] = {"turn": turn, "agent": agent, "text": text}
            if describe is not None:
                row.update(describe(agent, e, b))
            self.steps.setdefault((unit.env_offset + e, b), []).append(row)

    def records(
        self, problems: Sequence[Any] | None, ids: Sequence[str], envs: Sequence[EnvResult]
    ) -> list[dict[str, Any]]:
        """One record per episode, envs ascending then samples; `envs` in step order (an env's
        results in branch order), `problems[e]` the problem of env e (None for games)."""
        out = []
        seen: dict[int, int] = {}
        for res in envs:
            b = seen[res.env] = seen.get(res.env, -1) + 1
            turns = self.steps.get((res.env, b), [])
            rec: dict[str, Any] = {"id": ids[res.env], "sample": b}
            if problems is not None:
                p = problems[res.env]
                rec["question"] = getattr(p, "question", None) or getattr(p, "prompt", None)
                rec["gold"] = getattr(p, "answer", None)
            rec["turns"] = turns
            if turns and "team_answer" in turns[-1]:
                rec["final_answer"] = turns[-1]["team_answer"]
            rec.update(correct=bool(res.success), turns_used=res.turns)
            out.append(rec)
        return out


def revisited(record: dict[str, Any]) -> bool:
    """Some agent was shown, at a later turn, an observation it had been shown before (games): the team
    came back to a state it stood on. Under greedy decoding and prompts without the turn (`compact`),
    the prompts then repeat too, and so do the answers, until the turn limit."""
    seen: dict[str, set[str]] = {}
    for row in record["turns"]:
        obs = row.get("obs")
        if not obs:
            continue
        before = seen.setdefault(row["agent"], set())
        if obs in before:
            return True
        before.add(obs)
    return False


def write_jsonl(path: str | Path, records: Sequence[dict[str, Any]]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
