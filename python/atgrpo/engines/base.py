"""The rollout engine interface every backend implements (torch here, vLLM on GPUs).

Token-in, token-out: prompts are token ids, completions are token ids with the log-probability the
engine sampled each token with (under the sampling temperature), so the learner can train on exactly
what was generated and compare its own log-probabilities with the engine's.
An engine holds one policy at one version at a time; `load_weights` replaces it whole.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import torch

from atgrpo.engines.errors import PromptTooLongError


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    """Nucleus sampling. Below 1 the reported logprobs are those of the renormalised nucleus (what
    was really sampled from), which the learner cannot reproduce: training refuses it
    (`rollout.top_p`), evaluation may use it."""
    greedy: bool = False
    """Argmax decoding (evaluation); logprobs are then those of the temperature-1 distribution."""
    stop_token_ids: tuple[int, ...] = ()
    """Generation ends after any of these, in addition to the model's own stop tokens."""


@dataclass
class Completion:
    token_ids: list[int]
    """Generated ids, the stop token included when one was produced."""
    logprobs: list[float]
    """One per generated token."""
    finished: bool
    """A stop token ended it (False: it hit max_new_tokens)."""


@dataclass
class EngineStats:
    generate_s: float = 0.0
    sequences: int = 0
    tokens: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def record(self, seconds: float, completions: "list[Completion]") -> None:
        """Count one `generate` call that took `seconds` and returned `completions`."""
        self.generate_s += seconds
        self.sequences += len(completions)
        self.tokens += sum(len(c.token_ids) for c in completions)


class RolloutEngine(abc.ABC):
    policy: str
    version: int

    @abc.abstractmethod
    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Completion]:
        """One completion per prompt, in order. Prompts are batched together by the engine."""

    @abc.abstractmethod
    def load_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        """Install a full set of weights (HF parameter names) as `version`."""

    def sleep(self) -> None:
        """Give back the device memory the engine can spare while its actor waits for work
        (vLLM with `rollout.vllm_sleep_when_idle` on a GPU). Default: nothing to give back."""

    def wake(self) -> None:
        """Undo `sleep`; the actor calls it before the engine's next weight load or generate."""


def check_prompts(prompts: list[list[int]], params: SamplingParams, context_length: int | None) -> None:
    """Refuse empty prompts and prompts that leave no room for `max_new_tokens` in the context."""
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    if context_length is not None:
        longest = max((len(p) for p in prompts), default=0)
        if longest + params.max_new_tokens > context_length:
            raise PromptTooLongError(
                f"a prompt of {longest} tokens plus max_new_tokens={params.max_new_tokens} exceeds the engine's "
                f"{context_length} tokens per sequence (rollout.max_prompt_tokens + max_new_tokens, at most the "
                f"model's context); shorten the prompt (task.prompts, task.turns) or raise rollout.max_prompt_tokens"
            )
