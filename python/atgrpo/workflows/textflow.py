"""The turn loop shared by the code and math workflows: problems from a dataset, state held in Python.

A task (`TextTask` subclass) says how to build an agent's prompt from a problem and a state, and how a
batch of candidate texts changes the state (`apply`, which may run programs in the sandbox or check
answers). This module does the rest exactly as the games workflow does (ALGORITHM.md, "One training
step"):

- tree (default): every agent-turn samples K candidates per env; candidate k is applied to the state
  of slot k; reward r = alpha * team + local; the K samples form the group (env, agent, turn) with the
  env's own index; the best candidate (highest reward, ties to the lowest index) is copied into all K
  slots, so the next agent sees it. Rewards, `done` and selection read the very states candidates were
  applied to.
- parallel: K independent episodes per env (slot k is branch k).
- greedy evaluation (`WorkUnit.greedy`): K = 1, argmax decoding, no samples kept.
- trajectory grouping: as in games, every sample of branch k gets the branch's return and key (env, 0, 0).

States are immutable (`frozen` dataclasses), so carrying a branch on is an assignment. Env seed `s`
is problem `s mod len(problems)` of the split's problem set; `EnvResult.success` is the final state's
success; `episode_return` is the sum of the chosen branch's rewards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Generic, Sequence, TypeVar

import numpy as np

from atgrpo.config import RunConfig
from atgrpo.engines.base import SamplingParams
from atgrpo.messages import EnvResult, GroupKey, Sample, WorkUnit
from atgrpo.workflows.games import PolicyHandle, UnitResult

S = TypeVar("S")
FEEDBACK_CHARS = 1500
"""Anything one agent is shown of another's output is cut to this many characters (bounded prompts)."""
COMPACT_CHARS = 200
"""The same limit for the compact templates (the tiny model's character tokenizer, short context)."""


def clip(text: str, limit: int = FEEDBACK_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 15] + "\n...[truncated]"


@dataclass(frozen=True)
class Outcome(Generic[S]):
    """What one candidate did: its new state and the reward parts read from that state."""

    state: S
    team: float
    local: float
    done: bool
    success: bool


class TextTask(Generic[S]):
    """Base of the code and math workflows. Subclasses set `roles` and implement the four hooks."""

    task: str = ""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.roles = list(cfg.task.roles)
        self.turns = cfg.task.turns
        self.alpha = cfg.task.alpha
        self.use_chat_template = cfg.task.prompts == "paper"

    # -- hooks ------------------------------------------------------------------------------------
    def problems(self, split: str) -> Sequence[Any]:
        raise NotImplementedError

    def initial_state(self, problem: Any) -> S:
        raise NotImplementedError

    def prompt_text(self, role: str, problem: Any, state: S, turn: int) -> str:
        raise NotImplementedError

    def apply(self, role: str, items: list[tuple[Any, S, str]]) -> list[Outcome[S]]:
        """Apply each (problem, state, candidate text); one `Outcome` per item, in order. Never raises
        for anything the model wrote."""
        raise NotImplementedError

    def close(self) -> None:
        """Release sandboxes and the like (idempotent)."""

    # -- shared -----------------------------------------------------------------------------------
    def encode(self, tokenizer, text: str) -> list[int]:
        if self.use_chat_template and getattr(tokenizer, "chat_template", None):
            return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True))
        return list(tokenizer.encode(text, add_special_tokens=False))

    def problem_of(self, seed: int, split: str) -> Any:
        probs = self.problems(split)
        if not probs:
            raise ValueError(f"{self.task}: the {split} problem set is empty")
        return probs[int(seed) % len(probs)]

    def run(
        self,
        unit: WorkUnit,
        policies: dict[str, PolicyHandle],
        sampling: SamplingParams,
        *,
        run_id: str = "",
        seed: int | None = None,
        on_groups: Callable[[list[Sample]], None] | None = None,
    ) -> UnitResult:
        ro = self.cfg.rollout
        greedy = unit.greedy
        k = 1 if greedy else ro.k
        tree = ro.sampling == "tree" and not greedy
        params = SamplingParams(
            max_new_tokens=sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            greedy=greedy or sampling.greedy,
            stop_token_ids=sampling.stop_token_ids,
        )
        n = len(unit.seeds)
        problems = [self.problem_of(s, unit.split) for s in unit.seeds]
        states: list[list[S]] = [[self.initial_state(p)] * k for p in problems]
        done = np.zeros((n, k), dtype=bool)
        success = np.zeros((n, k), dtype=bool)
        returns = np.zeros((n, k), dtype=np.float64)
        turns_used = np.zeros((n, k), dtype=np.int64)
        timings = {"generate_s": 0.0, "env_s": 0.0}
        samples: list[Sample] = []
        rng = np.random.default_rng(seed)
        call = 0
        for turn in range(self.turns):
            for agent, role in enumerate(self.roles):
                live = [(e, b) for e in range(n) for b in range(k) if not done[e, b]]
                if not live:
                    break
                policy = self.cfg.role_policy[role]
                handle = policies[policy]
                prompts = [self.encode(handle.tokenizer, self.prompt_text(role, problems[e], states[e][b], turn)) for e, b in live]
                t0 = time.perf_counter()
                call += 1
                outs = handle.engine.generate(prompts, params, seed=None if seed is None else (seed * 1000 + call) % (2**63))
                timings["generate_s"] += time.perf_counter() - t0
                texts = [handle.tokenizer.decode(c.token_ids, skip_special_tokens=True) for c in outs]
                t0 = time.perf_counter()
                results = self.apply(role, [(problems[e], states[e][b], t) for (e, b), t in zip(live, texts)])
                timings["env_s"] += time.perf_counter() - t0
                rewards = [self.alpha * r.team + r.local for r in results]
                for (e, b), r, rew in zip(live, results, rewards):
                    states[e][b] = r.state
                    returns[e, b] += rew
                    turns_used[e, b] = turn + 1
                    done[e, b] = r.done
                    success[e, b] = r.success
                if tree:
                    chooser = rng if ro.selection == "random" else None
                    self._select(live, rewards, states, done, success, returns, turns_used, chooser)
                if greedy:
                    continue
                group = [
                    Sample(
                        run_id=run_id,
                        policy=policy,
                        version=handle.engine.version,
                        step=unit.step,
                        role=role,
                        key=GroupKey(unit.env_offset + e, agent, turn),
                        prompt_ids=prompts[i],
                        response_ids=outs[i].token_ids,
                        logprobs=outs[i].logprobs,
                        reward=float(rewards[i]),
                        reward_team=float(results[i].team),
                        reward_local=float(results[i].local),
                        success=bool(results[i].success),
                        truncated_response=not outs[i].finished,
                        branch=b,
                    )
                    for i, (e, b) in enumerate(live)
                ]
                samples.extend(group)
                if on_groups is not None and ro.grouping != "trajectory":
                    on_groups(group)
        if ro.grouping == "trajectory" and not greedy:
            for s in samples:
                s.reward = float(returns[s.key.env - unit.env_offset, s.branch])
                s.key = GroupKey(s.key.env, 0, 0)
            if on_groups is not None and samples:
                on_groups(samples)
        envs = [
            EnvResult(unit.env_offset + e, bool(success[e, b]), int(turns_used[e, b]), float(returns[e, b]))
            for e in range(n)
            for b in (range(1) if tree or greedy else range(k))
        ]
        return UnitResult(samples=samples, envs=envs, timings=timings)

    @staticmethod
    def _select(live, rewards, states, done, success, returns, turns_used, chooser=None) -> None:
        """Tree selection: each env's best candidate (ties to the lowest index) fills all K slots;
        `chooser` (a numpy Generator) picks a uniformly random candidate instead (the ablation)."""
        cands: dict[int, list[tuple[float, int]]] = {}
        for (e, b), r in zip(live, rewards):
            cands.setdefault(e, []).append((r, b))
        k = done.shape[1]
        for e, rb in cands.items():
            if chooser is not None:
                b = rb[int(chooser.integers(len(rb)))][1]
            else:
                b = max(rb, key=lambda x: (x[0], -x[1]))[1]
            states[e] = [states[e][b]] * k
            done[e, :] = done[e, b]
            success[e, :] = success[e, b]
            returns[e, :] = returns[e, b]
            turns_used[e, :] = turns_used[e, b]
