"""The pieces both micro-batch layouts share: the sequences to pack, and numpy rows -> `MicroBatch`.

A leaf of the packing modules: `batching` (the plain layout and the entry points) and
`shared_prefix` (the shared-prompt layout) both build on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from atgrpo.learner.microbatch import MicroBatch, SharedPrefix


@dataclass(frozen=True)
class Sequences:
    """What packing needs of n sequences, whatever they came from."""

    prompts: Sequence[Sequence[int]]
    """[n] prompt token ids."""
    responses: Sequence[Sequence[int]]
    """[n] response token ids (the tokens the loss is taken on)."""
    logprobs: Sequence[Sequence[float]]
    """[n] behaviour log-probability of each response token."""
    advantages: np.ndarray
    """[n] float64, one finite advantage per sequence."""


def token_weights(loss_mask: np.ndarray, aggregation: str) -> np.ndarray:
    """[B, L] float32 weights from a [B, L] bool loss mask: the mask itself ("token_mean",
    "seq_mean_token_sum", whose constant normaliser does the rest), or the mask divided by its
    row's token count ("seq_mean")."""
    weights = loss_mask.astype(np.float32)
    if aggregation == "seq_mean":
        weights /= np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
    return weights


def finish(
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    loss_mask: np.ndarray,
    token_advantages: np.ndarray,
    seqs: Sequences,
    rows: Sequence[int],
    aggregation: str,
    prefix: SharedPrefix | None = None,
) -> MicroBatch:
    """A `MicroBatch` from [B, L] numpy arrays of either layout: the behaviour log-probs of `rows` are
    laid on the loss mask (row-major, so each row's response tokens in order) and weights derived."""
    behaviour = np.zeros(input_ids.shape, dtype=np.float32)
    if rows:
        behaviour[loss_mask] = np.concatenate([np.asarray(seqs.logprobs[i], np.float32) for i in rows])
    return MicroBatch(
        input_ids=torch.from_numpy(input_ids),
        attention_mask=torch.from_numpy(attention_mask.astype(np.int64)),
        loss_mask=torch.from_numpy(loss_mask),
        advantages=torch.from_numpy(token_advantages),
        behaviour_logprobs=torch.from_numpy(behaviour),
        token_weights=torch.from_numpy(token_weights(loss_mask, aggregation)),
        sample_index=tuple(int(i) for i in rows),
        prefix=prefix,
    )


__all__ = ["Sequences", "finish", "token_weights"]
