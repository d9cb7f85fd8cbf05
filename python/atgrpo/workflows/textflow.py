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
from pathlib import Path
from typing import Any, Callable, Generic, Sequence, TypeVar

import numpy as np

from atgrpo.config import RunConfig
from atgrpo.engines.base import SamplingParams
from atgrpo.messages import Sample, WorkUnit
from atgrpo.workflows.games import PolicyHandle, UnitResult
from atgrpo.workflows.prompts import envs_dir
from atgrpo.workflows.rollout import (
    LazySandbox, answer_texts, choose_branch, encode_prompt, engine_seed, finish_unit, make_group, unit_sampling,
)

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

    load_problems: Callable[[Path, str], Sequence[Any]]
    """Subclasses: the dataset loader, `(path, format) -> problems` (a `staticmethod`)."""

    def __init__(self, cfg: RunConfig, problems: dict[str, Sequence[Any]] | None = None) -> None:
        self.cfg = cfg
        self.roles = list(cfg.task.roles)
        self.turns = cfg.task.turns
        self.alpha = cfg.task.alpha
        self.use_chat_template = cfg.task.prompts == "paper"
        self._problems: dict[str, Sequence[Any]] = dict(problems or {})
        self._sandbox = LazySandbox(cfg)

    # -- hooks ------------------------------------------------------------------------------------
    def problems(self, split: str) -> Sequence[Any]:
        """The split's problem set: `task.eval_dataset` for eval, else `task.dataset`, else the task
        pack's `envs/<task>/problems.jsonl`; loaded once."""
        if split not in self._problems:
            t = self.cfg.task
            path = (t.eval_dataset if split == "eval" else None) or t.dataset or envs_dir() / self.task / "problems.jsonl"
            self._problems[split] = self.load_problems(Path(path), t.dataset_format)
        return self._problems[split]

    def initial_state(self, problem: Any) -> S:
        raise NotImplementedError

    def prompt_text(self, role: str, problem: Any, state: S, turn: int) -> str:
        raise NotImplementedError

    def apply(self, role: str, items: list[tuple[Any, S, str]]) -> list[Outcome[S]]:
        """Apply each (problem, state, candidate text); one `Outcome` per item, in order. Never raises
        for anything the model wrote."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the sandbox, if one was started (idempotent)."""
        self._sandbox.close()

    # -- shared -----------------------------------------------------------------------------------
    @property
    def sandbox(self):
        return self._sandbox.get()

    def encode(self, tokenizer, text: str) -> list[int]:
        return encode_prompt(tokenizer, text, self.use_chat_template)

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
        params = unit_sampling(sampling, greedy)
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
                outs = handle.engine.generate(prompts, params, seed=engine_seed(seed, call))
                timings["generate_s"] += time.perf_counter() - t0
                texts = answer_texts(handle.tokenizer, outs, self.cfg.rollout.truncated_is_invalid)
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
                group = make_group(
                    unit, run_id=run_id, policy=policy, version=handle.engine.version, role=role, agent=agent, turn=turn,
                    live=live, prompts=prompts, outs=outs, rewards=rewards, teams=[r.team for r in results],
                    locals_=[r.local for r in results], successes=[r.success for r in results],
                )
                samples.extend(group)
                if on_groups is not None and ro.grouping != "trajectory":
                    on_groups(group)
        envs = finish_unit(
            unit, self.cfg, samples, returns=returns, success=success, turns_used=turns_used,
            one_per_env=tree or greedy, on_groups=on_groups,
        )
        return UnitResult(samples=samples, envs=envs, timings=timings)

    @staticmethod
    def _select(live, rewards, states, done, success, returns, turns_used, chooser=None) -> None:
        """Tree selection: each env's best candidate (ties to the lowest index) fills all K slots;
        `chooser` (a numpy Generator) picks a uniformly random candidate instead (the ablation)."""
        cands: dict[int, tuple[list[int], list[float]]] = {}
        for (e, b), r in zip(live, rewards):
            branches, rs = cands.setdefault(e, ([], []))
            branches.append(b)
            rs.append(r)
        k = done.shape[1]
        for e, (branches, rs) in cands.items():
            b = choose_branch(branches, rs, chooser)
            states[e] = [states[e][b]] * k
            done[e, :] = done[e, b]
            success[e, :] = success[e, b]
            returns[e, :] = returns[e, b]
            turns_used[e, :] = turns_used[e, b]
