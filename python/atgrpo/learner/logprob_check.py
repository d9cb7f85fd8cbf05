"""How closely an engine's log-probabilities agree with the learner's on the same tokens.

Token-in, token-out training needs the two to be the same function of the same weights: the PPO
ratio is `exp(learner - engine)`, so any gap is a bias from step 1. This scores an engine's
completions through the learner's own batching and `logprobs.token_logprobs`, the path training takes
(used by `atgrpo-bench engines` and the engine tests; training reports the same gap per step as
`learner/<policy>/logprob_mismatch`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from atgrpo.devices import model_device
from atgrpo.engines.base import Completion
from atgrpo.learner.batching import pair_microbatches
from atgrpo.learner.logprobs import token_logprobs


def learner_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[list[int]],
    outs: Sequence[Completion],
    temperature: float,
    pad_id: int,
    max_tokens: int = 8192,
) -> list[list[float]]:
    """The learner's log-probability of every token of every completion, at `temperature`."""
    pairs = [(list(p), list(o.token_ids)) for p, o in zip(prompts, outs)]
    result: dict[int, list[float]] = {}
    for mb in pair_microbatches(pairs, max_tokens=max_tokens, pad_id=pad_id):
        mb = mb.to(model_device(model))
        with torch.no_grad():
            logp, _ = token_logprobs(model, mb, temperature)
        for row, i in enumerate(mb.sample_index):
            result[i] = logp[row][mb.loss_mask[row, 1:]].cpu().tolist()
    return [result[i] for i in range(len(pairs))]


def logprob_mismatch(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]]) -> tuple[float, float, int]:
    """(mean |a - b|, max |a - b|, token count) over every token of every sequence."""
    diffs = np.concatenate(
        [np.abs(np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)) for x, y in zip(a, b)]
    )
    return float(diffs.mean()), float(diffs.max()), int(diffs.size)


__all__ = ["learner_logprobs", "logprob_mismatch"]
