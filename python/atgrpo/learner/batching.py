"""Turn a policy's samples of one step into padded micro-batches of torch tensors.

Packing decisions (which sample goes in which micro-batch) come from the Rust kernels
(`plan_microbatches`, first-fit decreasing by token count; `pad_batch`). Everything here is [B, L]
right-padded; the loss shifts by one itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from atgrpo import kernels
from atgrpo.messages import Sample


@dataclass
class MicroBatch:
    input_ids: torch.Tensor
    """[B, L] int64, right-padded."""
    attention_mask: torch.Tensor
    """[B, L] int64, 1 on real tokens."""
    loss_mask: torch.Tensor
    """[B, L] bool, True where the token is a response token (it is *predicted* from position - 1)."""
    advantages: torch.Tensor
    """[B, L] float32, the sample's advantage on its response tokens."""
    behaviour_logprobs: torch.Tensor
    """[B, L] float32, the engine's log-probability of each response token, 0 elsewhere."""
    token_weights: torch.Tensor
    """[B, L] float32 weight of each response token in the step loss: 1 for "token_mean";
    1 / (its sample's response length) for "seq_mean"."""
    sample_index: tuple[int, ...] = ()
    """Which of the step's samples (indices into the list given to `make_microbatches`) the rows are."""
    prefix_ids: torch.Tensor | None = None
    """Shared-prefix layout only (`learner.shared_prefix`): [P, Lq] distinct prompts less their last
    token, left-padded; the rows then hold that last token and the response. None: plain layout."""
    prefix_mask: torch.Tensor | None = None
    """[P, Lq] int64, 1 on real prompt tokens (shared-prefix layout)."""
    row_prefix: torch.Tensor | None = None
    """[B] int64, the prompt each row continues (shared-prefix layout)."""

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum())


def loss_normalizer(samples: Sequence[Sample], aggregation: str) -> int:
    """What the summed (weighted) token losses of a step are divided by: tokens or samples."""
    if aggregation == "seq_mean":
        return len(samples)
    return sum(len(s.response_ids) for s in samples)


def make_microbatches(
    samples: Sequence[Sample], advantages: np.ndarray, *, max_tokens: int, pad_id: int, aggregation: str = "token_mean"
) -> list[MicroBatch]:
    """All samples, split so that no micro-batch holds more than `max_tokens` (prompt + response) tokens.

    `aggregation`: "token_mean" (every response token of the step counts once, the paper's choice)
    or "seq_mean" (each sample counts once, its tokens share its weight; no length bias).
    """
    if aggregation not in ("token_mean", "seq_mean"):
        raise ValueError(f"aggregation must be 'token_mean' or 'seq_mean', got {aggregation!r}")
    if not samples:
        return []
    lengths = np.array([len(s.prompt_ids) + len(s.response_ids) for s in samples], dtype=np.int64)
    offsets = np.zeros(len(samples) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.fromiter(
        (t for s in samples for t in (*s.prompt_ids, *s.response_ids)), dtype=np.int64, count=int(offsets[-1])
    )
    prompt_lens = np.array([len(s.prompt_ids) for s in samples], dtype=np.int64)
    out = []
    for idx in kernels.plan_microbatches(lengths, max_tokens):
        padded = kernels.pad_batch(tokens, offsets, prompt_lens, advantages, idx, pad_id=pad_id)
        behaviour = np.zeros(padded.input_ids.shape, dtype=np.float32)
        behaviour[padded.loss_mask] = np.concatenate([np.asarray(samples[i].logprobs, np.float32) for i in idx])
        weights = padded.loss_mask.astype(np.float32)
        if aggregation == "seq_mean":
            weights /= np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
        out.append(
            MicroBatch(
                input_ids=torch.from_numpy(padded.input_ids),
                attention_mask=torch.from_numpy(padded.attention_mask.astype(np.int64)),
                loss_mask=torch.from_numpy(padded.loss_mask),
                advantages=torch.from_numpy(padded.token_advantages),
                behaviour_logprobs=torch.from_numpy(behaviour),
                token_weights=torch.from_numpy(weights),
                sample_index=tuple(int(i) for i in idx),
            )
        )
    return out
