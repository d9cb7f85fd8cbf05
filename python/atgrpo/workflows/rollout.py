"""The parts of a rollout that every workflow (games, code, math) does the same way.

Prompt encoding, the sampling parameters of a unit, the engine seed of each generate call, tree
selection's choice of branch, building one agent-turn's group of samples, and closing a unit
(trajectory regrouping and per-env results). Workflows keep their own state handling (an `EnvPool`
for the games, Python states for code and math) and call these.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from atgrpo.config import RunConfig
from atgrpo.engines.base import Completion, SamplingParams
from atgrpo.messages import EnvResult, GroupKey, Sample, WorkUnit

if TYPE_CHECKING:
    from atgrpo.sandbox import Sandbox


def encode_prompt(tokenizer, text: str, chat: bool) -> list[int]:
    """Token ids of a prompt: the tokenizer's chat template when `chat` and it has one, else plain text."""
    if chat and getattr(tokenizer, "chat_template", None):
        # Render to text, then encode: what `apply_chat_template(tokenize=True)` returns differs between
        # transformers versions (a list, or a BatchEncoding whose list() is its keys). The template
        # writes its own special tokens, so encoding adds none.
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return [int(t) for t in ids]


def unit_sampling(sampling: SamplingParams, greedy: bool) -> SamplingParams:
    """`sampling` as a unit uses it: argmax decoding for greedy (evaluation) units."""
    return SamplingParams(
        max_new_tokens=sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        greedy=greedy or sampling.greedy,
        stop_token_ids=sampling.stop_token_ids,
    )


def engine_seed(seed: int | None, call: int) -> int | None:
    """The seed of a unit's `call`-th generate call: samples depend on (unit seed, call) only."""
    return None if seed is None else (seed * 1000 + call) % (2**63)


def answer_texts(tokenizer, outs: Sequence[Completion], truncated_is_invalid: bool) -> list[str]:
    """The text each completion answers. With `truncated_is_invalid`, a completion cut off at
    `max_new_tokens` (no stop token) answers nothing, "", which every task scores as unparseable."""
    return [
        "" if truncated_is_invalid and not c.finished else tokenizer.decode(c.token_ids, skip_special_tokens=True)
        for c in outs
    ]


def choose_branch(branches: Sequence[int], rewards: Sequence[float], chooser: np.random.Generator | None) -> int:
    """Tree selection among one env's candidates (`branches` ascending, `rewards` in the same order):
    the highest reward, ties to the lowest branch; `chooser` picks uniformly instead (the ablation)."""
    if chooser is not None:
        return branches[int(chooser.integers(len(branches)))]
    return branches[int(np.argmax(np.asarray(rewards, dtype=np.float64)))]  # argmax: first maximum


def make_group(
    unit: WorkUnit, *, run_id: str, policy: str, version: int, role: str, agent: int, turn: int,
    live: Sequence[tuple[int, int]], prompts: Sequence[list[int]], outs: Sequence[Completion],
    rewards: Sequence[float] | np.ndarray, teams: Sequence[float] | np.ndarray,
    locals_: Sequence[float] | np.ndarray, successes: Sequence[bool] | np.ndarray,
) -> list[Sample]:
    """One agent-turn's samples, item i being candidate `live[i]` = (env, branch), keyed (env, agent, turn)."""
    return [
        Sample(
            run_id=run_id,
            policy=policy,
            version=version,
            step=unit.step,
            role=role,
            key=GroupKey(unit.env_offset + e, agent, turn),
            prompt_ids=prompts[i],
            response_ids=outs[i].token_ids,
            logprobs=outs[i].logprobs,
            reward=float(rewards[i]),
            reward_team=float(teams[i]),
            reward_local=float(locals_[i]),
            success=bool(successes[i]),
            truncated_response=not outs[i].finished,
            branch=b,
        )
        for i, (e, b) in enumerate(live)
    ]


def finish_unit(
    unit: WorkUnit, cfg: RunConfig, samples: list[Sample], *, returns: np.ndarray, success: np.ndarray,
    turns_used: np.ndarray, one_per_env: bool, on_groups: Callable[[list[Sample]], None] | None,
) -> list[EnvResult]:
    """Close a unit: with trajectory grouping every sample of branch k gets the branch's return and the
    key (env, 0, 0), and all samples stream now (their rewards were not final before); returns the
    per-env results (branch 0 only when `one_per_env`: tree sampling and greedy units)."""
    if cfg.rollout.grouping == "trajectory" and not unit.greedy:
        for s in samples:
            s.reward = float(returns[s.key.env - unit.env_offset, s.branch])
            s.key = GroupKey(s.key.env, 0, 0)
        if on_groups is not None and samples:
            on_groups(samples)
    n, k = returns.shape
    return [
        EnvResult(unit.env_offset + e, bool(success[e, b]), int(turns_used[e, b]), float(returns[e, b]))
        for e in range(n)
        for b in (range(1) if one_per_env else range(k))
    ]


class LazySandbox:
    """A workflow's sandbox, started on first use (most runs never need one) and closed by `close()`."""

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


__all__ = [
    "LazySandbox", "answer_texts", "choose_branch", "encode_prompt", "engine_seed", "finish_unit", "make_group", "unit_sampling",
]
