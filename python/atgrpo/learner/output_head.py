"""Log-probs and entropy of chosen next tokens from a causal LM's final hidden states, taken in
chunks of tokens so that [tokens x vocab] logits never exist at once.

Per chunk of n token rows: logits = lm_head(h) [n, V] -> float32 -> / temperature -> log-softmax
-> gather the next token (-> entropy when asked): the same operations, in the same order, as on the
whole sequence, so values equal the unchunked ones up to float rounding. Each chunk runs under
`torch.utils.checkpoint` (non-reentrant) when autograd records: its logits are dropped after the
forward and recomputed in backward, so at most one chunk's logits (and their gradient) live at a
time, forward or backward. Only the rows asked for are scored (the loss asks for its response
tokens: in the plain layout most positions are prompt, whose logits the loss never reads); other
columns come back 0.

How it reaches the model: `scoring(model, request)` replaces the output layer's `forward` for the
duration of one model call, so the model's own forward runs (a DeepSpeed engine's too, with its
autocast and backward hooks on the outputs) and its `lm_head(hidden)` returns the scores instead
of logits. This needs a model whose logits are exactly `lm_head(final hidden states)` (Llama, Qwen2/3,
Mistral, SmolLM2); `plain_head` returns None for any other (soft-capped or scaled logits), and the
caller then scores the model's own logits unchunked.

`chunk_tokens = 0` is the unchunked computation, kept as the reference of the tests and of
`atgrpo-bench memory`: every position's logits at once, kept for backward.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "logits_scaling")
"""Config fields of HF models whose logits are not `lm_head(hidden)` alone (Gemma 2, Cohere, Granite)."""


@dataclass(frozen=True)
class ScoreRequest:
    targets: torch.Tensor
    """[B, T] int64: the token each position predicts (`input_ids[:, 1:]`)."""
    temperature: float
    entropy: bool
    """Also return the entropy of each scored position's distribution."""
    chunk_tokens: int
    """Rows per chunk; 0: the whole [B, T] at once, every position, nothing recomputed."""
    rows: torch.Tensor | None = None
    """[B, T] bool: the positions to score (others are 0); None, or none set: all. Ignored when
    `chunk_tokens` is 0."""


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """[...] entropy of the softmax of [..., V] logits (differentiable)."""
    probs = F.softmax(logits, dim=-1)
    return -(probs * F.log_softmax(logits, dim=-1)).sum(-1)


def score_logits(logits: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool) -> torch.Tensor:
    """[k, ...] float32 log-prob of `targets` [...] under [..., V] `logits` / temperature, then
    (k = 2) the entropy. The one definition of the per-token scores, chunked or not."""
    logits = logits.float() / temperature
    logp = torch.gather(F.log_softmax(logits, dim=-1), -1, targets[..., None]).squeeze(-1)
    return torch.stack([logp, entropy_from_logits(logits)]) if entropy else logp[None]


def _score_hidden(
    hidden: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    temperature: float,
    entropy: bool,
) -> torch.Tensor:
    return score_logits(F.linear(hidden, weight, bias), targets, temperature, entropy)


def score_hidden_states(hidden: torch.Tensor, head: torch.nn.Linear, req: ScoreRequest) -> torch.Tensor:
    """[k, B, T] scores of [B, T, H] final hidden states (position t predicts `req.targets[:, t]`)."""
    b, t, h = hidden.shape
    if req.chunk_tokens == 0:
        return _score_hidden(hidden, req.targets, head.weight, head.bias, req.temperature, req.entropy)
    flat = hidden.reshape(b * t, h)
    targets = req.targets.reshape(b * t)
    # Meta tensors (the device-discipline tests) have no values to select by: score every row.
    selective = req.rows is not None and req.rows.device.type != "meta"
    index = req.rows.reshape(b * t).nonzero().squeeze(1) if selective else None
    if index is not None and index.numel() == 0:
        # Nothing asked for (DeepSpeed's zero-contribution micro-batch): score every row instead,
        # so that backward still reaches every parameter, as on the ranks that have work.
        index = None
    if index is not None:
        flat, targets = flat.index_select(0, index), targets.index_select(0, index)
    pieces = []
    for lo in range(0, flat.shape[0], req.chunk_tokens):
        args = (
            flat[lo : lo + req.chunk_tokens],
            targets[lo : lo + req.chunk_tokens],
            head.weight,
            head.bias,
            req.temperature,
            req.entropy,
        )
        pieces.append(
            checkpoint(_score_hidden, *args, use_reentrant=False) if torch.is_grad_enabled() else _score_hidden(*args)
        )
    if not pieces:  # no positions at all (a one-token batch)
        return hidden.new_zeros((2 if req.entropy else 1, b, t), dtype=torch.float32)
    scores = torch.cat(pieces, dim=1)
    if index is not None:
        scores = scores.new_zeros((scores.shape[0], b * t)).index_copy(1, index, scores)
    return scores.view(scores.shape[0], b, t)


def plain_head(model: torch.nn.Module) -> torch.nn.Linear | None:
    """The output layer of `model` (or of a DeepSpeed engine's module) when its logits are exactly
    `lm_head(final hidden states)`; None otherwise."""
    inner = getattr(model, "module", model)
    get_head = getattr(inner, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    config = getattr(inner, "config", None)
    if not isinstance(head, torch.nn.Linear) or any(
        getattr(config, f, None) not in (None, 1.0) for f in LOGIT_POSTPROCESSING
    ):
        return None
    return head


@contextlib.contextmanager
def scoring(head: torch.nn.Linear, req: ScoreRequest) -> Iterator[None]:
    """Within the block, `head(hidden [B, L, H])` returns `score_hidden_states(hidden[:, :-1])`
    ([k, B, L - 1]) instead of logits. Not re-entrant: one scored model call at a time."""
    if "forward" in vars(head):
        raise RuntimeError("the output layer is already scoring (nested model calls?)")

    def forward(self: torch.nn.Linear, hidden: torch.Tensor) -> torch.Tensor:
        return score_hidden_states(hidden[:, :-1], self, req)

    head.forward = types.MethodType(forward, head)
    try:
        yield
    finally:
        del head.forward


__all__ = ["ScoreRequest", "entropy_from_logits", "plain_head", "score_hidden_states", "score_logits", "scoring"]
