"""Shared-prompt micro-batches: each distinct prompt is run through the model once per micro-batch.

In tree sampling the K candidates of a group answer one identical prompt, and prompts are most of
the tokens (a game prompt is ~80 tokens, an answer ~10-30). The plain layout runs every sample's
prompt again; this one runs a micro-batch's distinct prompts once, keeps their KV cache, and runs
only the responses on top of it (`learner.logprobs`). The log-probabilities equal the plain
layout's up to float rounding (tested), so the loss and its gradient do too.

Layout of a shared-prefix `MicroBatch` (B sample rows, P distinct prompts):
- `prefix.ids`, `prefix.mask` [P, Lq]: each prompt without its last token, left-padded (Lq >= 1).
- `prefix.row` [B]: which prompt row b continues.
- `input_ids`, `attention_mask` [B, 1 + Lr]: the prompt's last token, then the response, right-padded.
- `loss_mask`, `advantages`, `behaviour_logprobs`, `token_weights` [B, 1 + Lr], response positions
  only, exactly as in the plain layout (a token at position j is predicted from position j - 1).

Every sample needs a non-empty prompt and response. The token budget counts each distinct prompt
once per micro-batch; a prompt group larger than the budget is cut, its prompt counted in each piece.
"""

from __future__ import annotations

import numpy as np
import torch

from atgrpo import kernels
from atgrpo.learner.microbatch import MicroBatch, SharedPrefix
from atgrpo.learner.rows import Sequences, finish


def pack_shared_prefix(seqs: Sequences, *, max_tokens: int, pad_id: int, aggregation: str) -> list[MicroBatch]:
    """`seqs` (already validated by `batching.pack`) in the shared-prefix layout: first-fit decreasing
    (Rust kernel) over prompt groups."""
    if any(len(p) == 0 for p in seqs.prompts) or any(len(r) == 0 for r in seqs.responses):
        raise ValueError("shared-prefix micro-batches need a non-empty prompt and response in every sample")
    if not seqs.prompts:
        return []
    units, costs = _units(seqs, max_tokens)
    return [
        _build(seqs, [i for u in plan for i in units[u]], pad_id, aggregation)
        for plan in kernels.plan_microbatches(costs, max_tokens)
    ]


def _units(seqs: Sequences, max_tokens: int) -> tuple[list[list[int]], np.ndarray]:
    """Sequences grouped by identical prompt (first-seen order), cut so that no unit costs more than
    `max_tokens`; returns the units and their token costs (prompt once + every response)."""
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(seqs.prompts):
        by_prompt.setdefault(tuple(p), []).append(i)
    units: list[list[int]] = []
    costs: list[int] = []
    for prompt, members in by_prompt.items():
        cost, unit = len(prompt), list[int]()
        for i in members:
            extra = len(seqs.responses[i])
            if unit and cost + extra > max_tokens:
                units.append(unit)
                costs.append(cost)
                cost, unit = len(prompt), list[int]()
            unit.append(i)
            cost += extra
        units.append(unit)
        costs.append(cost)
    return units, np.asarray(costs, dtype=np.int64)


def _build(seqs: Sequences, rows: list[int], pad_id: int, aggregation: str) -> MicroBatch:
    prompts: dict[tuple[int, ...], int] = {}
    row_prefix = np.array([prompts.setdefault(tuple(seqs.prompts[i]), len(prompts)) for i in rows], dtype=np.int64)
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
    shape = (len(rows), 1 + max(len(seqs.responses[i]) for i in rows))
    input_ids = np.full(shape, pad_id, dtype=np.int64)
    attention = np.zeros(shape, dtype=np.int64)
    loss_mask = np.zeros(shape, dtype=bool)
    for b, i in enumerate(rows):
        n = len(seqs.responses[i])
        input_ids[b, 0] = seqs.prompts[i][-1]
        input_ids[b, 1 : 1 + n] = seqs.responses[i]
        attention[b, : 1 + n] = 1
        loss_mask[b, 1 : 1 + n] = True
    token_adv = loss_mask * seqs.advantages[rows].astype(np.float32)[:, None]
    prefix = SharedPrefix(torch.from_numpy(prefix_ids), torch.from_numpy(prefix_mask), torch.from_numpy(row_prefix))
    return finish(input_ids, attention, loss_mask, token_adv, seqs, rows, aggregation, prefix)


__all__ = ["pack_shared_prefix"]
