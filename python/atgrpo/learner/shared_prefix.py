"""Shared-prompt micro-batches: each distinct prompt is run through the model once per micro-batch.

In tree sampling the K candidates of a group answer one identical prompt, and prompts are most of
the tokens (a game prompt is ~80 tokens, an answer ~10-30). The plain layout runs every sample's
prompt again; this one runs a micro-batch's distinct prompts once, with the KV cache kept, gathers
the cache rows for every sample (an index, so gradients flow back to the one prompt pass), and then
runs only the responses. The log-probabilities are the same as the plain layout's up to float
rounding (tested), so the loss and its gradient are too.

Layout of a shared-prefix `MicroBatch` (B sample rows, P distinct prompts):
- `prefix_ids`, `prefix_mask` [P, Lq]: each prompt without its last token, left-padded (Lq >= 1).
- `row_prefix` [B]: which prompt row b continues.
- `input_ids`, `attention_mask` [B, 1 + Lr]: the prompt's last token, then the response, right-padded.
- `loss_mask`, `advantages`, `behaviour_logprobs`, `token_weights` [B, 1 + Lr], response positions
  only, exactly as in the plain layout (a token at position j is predicted from position j - 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from atgrpo import kernels
from atgrpo.learner.batching import MicroBatch, make_microbatches
from atgrpo.messages import Sample


def _units(samples: Sequence[Sample], max_tokens: int) -> tuple[list[list[int]], np.ndarray]:
    """Samples grouped by identical prompt (first-seen order), cut so that no unit costs more than
    `max_tokens`; returns the units and their token costs (prompt once + every response)."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(samples):
        by_prompt.setdefault(tuple(s.prompt_ids), []).append(i)
    units: list[list[int]] = []
    costs: list[int] = []
    for prompt, members in by_prompt.items():
        cost, unit = len(prompt), []
        for i in members:
            extra = len(samples[i].response_ids)
            if unit and cost + extra > max_tokens:
                units.append(unit)
                costs.append(cost)
                cost, unit = len(prompt), []
            unit.append(i)
            cost += extra
        units.append(unit)
        costs.append(cost)
    return units, np.asarray(costs, dtype=np.int64)


def make_prefix_microbatches(
    samples: Sequence[Sample], advantages: np.ndarray, *, max_tokens: int, pad_id: int, aggregation: str = "token_mean"
) -> list[MicroBatch]:
    """Like `make_microbatches`, in the shared-prefix layout. `max_tokens` bounds each micro-batch's
    tokens counted once per distinct prompt (first-fit decreasing over prompt groups, Rust kernel);
    a single sample longer than it raises `SampleTooLongError`, as in the plain layout."""
    if aggregation not in ("token_mean", "seq_mean"):
        raise ValueError(f"aggregation must be 'token_mean' or 'seq_mean', got {aggregation!r}")
    if any(len(s.prompt_ids) == 0 or len(s.response_ids) == 0 for s in samples):
        raise ValueError("shared-prefix micro-batches need a non-empty prompt and response in every sample")
    advantages = np.asarray(advantages, dtype=np.float64)
    if advantages.shape != (len(samples),) or not np.isfinite(advantages).all():
        raise ValueError(f"need one finite advantage per sample: {len(samples)} samples, advantages of shape {advantages.shape}")
    if not samples:
        return []
    units, costs = _units(samples, max_tokens)
    out = []
    for plan in kernels.plan_microbatches(costs, max_tokens):
        rows = [i for u in plan for i in units[u]]
        out.append(_build(samples, advantages, rows, pad_id, aggregation))
    return out


def microbatch_builder(share_prefix: bool) -> Callable[..., list[MicroBatch]]:
    """The step's micro-batch builder as `train.share_prefix` asks: this layout or the plain one
    (both take `(samples, advantages, *, max_tokens, pad_id, aggregation)`)."""
    return make_prefix_microbatches if share_prefix else make_microbatches


def _build(samples: Sequence[Sample], advantages: np.ndarray, rows: list[int], pad_id: int, aggregation: str) -> MicroBatch:
    prompts: dict[tuple[int, ...], int] = {}
    row_prefix = np.array([prompts.setdefault(tuple(samples[i].prompt_ids), len(prompts)) for i in rows], dtype=np.int64)
    # At least one column, so the prompt pass always runs: under ZeRO-3 every rank must make the same
    # number of forward calls (a prompt of one token leaves a fully masked row, which is harmless).
    lq = max(max(len(p) for p in prompts) - 1, 1)
    prefix_ids = np.full((len(prompts), lq), pad_id, dtype=np.int64)
    prefix_mask = np.zeros((len(prompts), lq), dtype=np.int64)
    for p, j in prompts.items():
        n = len(p) - 1
        if n:
            prefix_ids[j, lq - n :] = p[:-1]
            prefix_mask[j, lq - n :] = 1
    width = 1 + max(len(samples[i].response_ids) for i in rows)
    shape = (len(rows), width)
    input_ids = np.full(shape, pad_id, dtype=np.int64)
    attention = np.zeros(shape, dtype=np.int64)
    loss_mask = np.zeros(shape, dtype=bool)
    behaviour = np.zeros(shape, dtype=np.float32)
    for b, i in enumerate(rows):
        s = samples[i]
        n = len(s.response_ids)
        input_ids[b, 0] = s.prompt_ids[-1]
        input_ids[b, 1 : 1 + n] = s.response_ids
        attention[b, : 1 + n] = 1
        loss_mask[b, 1 : 1 + n] = True
        behaviour[b, 1 : 1 + n] = s.logprobs
    weights = loss_mask.astype(np.float32)
    if aggregation == "seq_mean":
        weights /= np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
    token_adv = loss_mask * advantages[rows].astype(np.float32)[:, None]
    return MicroBatch(
        input_ids=torch.from_numpy(input_ids),
        attention_mask=torch.from_numpy(attention),
        loss_mask=torch.from_numpy(loss_mask),
        advantages=torch.from_numpy(token_adv),
        behaviour_logprobs=torch.from_numpy(behaviour),
        token_weights=torch.from_numpy(weights),
        sample_index=tuple(rows),
        prefix_ids=torch.from_numpy(prefix_ids),
        prefix_mask=torch.from_numpy(prefix_mask),
        row_prefix=torch.from_numpy(row_prefix),
    )


def prefix_logits(model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor:
    """[B, 1 + Lr, vocab] logits of a shared-prefix micro-batch's rows (position j predicts j + 1).

    One pass over the distinct prompts fills a KV cache (logits only for the last position, which
    nobody reads: the rows start with the prompt's last token); the cache rows are gathered per
    sample and the rows run on top of it with positions continuing their prompt's.
    """
    from transformers import DynamicCache

    assert mb.prefix_ids is not None and mb.prefix_mask is not None and mb.row_prefix is not None
    cache = DynamicCache()
    prompt_len = mb.prefix_mask.sum(-1)  # without the last token
    positions = (mb.prefix_mask.cumsum(-1) - 1).clamp(min=0)
    model(
        input_ids=mb.prefix_ids, attention_mask=mb.prefix_mask, position_ids=positions,
        past_key_values=cache, use_cache=True, logits_to_keep=1,
    )
    cache.batch_select_indices(mb.row_prefix)
    mask = torch.cat([mb.prefix_mask[mb.row_prefix], mb.attention_mask], dim=1)
    steps = torch.arange(mb.input_ids.shape[1], device=mb.input_ids.device)
    positions = prompt_len[mb.row_prefix][:, None] + steps[None, :]
    return model(
        input_ids=mb.input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
    ).logits


__all__ = ["make_prefix_microbatches", "microbatch_builder", "prefix_logits"]
