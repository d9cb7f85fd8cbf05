"""Turn sequences (a step's samples, or demonstration pairs) into padded `MicroBatch`es.

There is one packing path: `build_microbatches` (samples of an RL step) and `pair_microbatches`
(supervised (prompt, response) pairs) both reduce their input to `Sequences` and call `pack`, which
picks the layout. Which sample goes in which micro-batch comes from the Rust kernels
(`plan_microbatches`, first-fit decreasing by token count; `pad_batch` for the plain layout), so the
split is deterministic. A micro-batch never holds more than `max_tokens` tokens (prompt + response;
in the shared-prefix layout each distinct prompt counts once); a single longer sample raises
`SampleTooLongError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from atgrpo import kernels
from atgrpo.learner.microbatch import MicroBatch, SharedPrefix
from atgrpo.learner.rows import Sequences, finish, token_weights
from atgrpo.learner.shared_prefix import pack_shared_prefix
from atgrpo.messages import Sample

AGGREGATIONS = ("token_mean", "seq_mean", "seq_mean_token_sum")
""""token_mean": every response token of the step counts once (the paper's choice); "seq_mean":
each sample counts once and its tokens share its weight (no length bias); "seq_mean_token_sum":
every token counts once and the step divides by samples x the response budget, a constant per
sample (Dr. GRPO: no length bias, and a long response's tokens are not weighed down)."""


def loss_normalizer(samples: Sequence[Sample], aggregation: str, response_budget: int = 0) -> int:
    """What the summed (weighted) token losses of a step are divided by: tokens, samples, or
    samples x `response_budget` (the longest response any agent may give; needed by
    "seq_mean_token_sum" only)."""
    if aggregation == "seq_mean":
        return len(samples)
    if aggregation == "seq_mean_token_sum":
        if response_budget < 1:
            raise ValueError(f"seq_mean_token_sum needs a response budget >= 1, got {response_budget}")
        return len(samples) * response_budget
    return sum(len(s.response_ids) for s in samples)


def build_microbatches(
    samples: Sequence[Sample],
    advantages: np.ndarray,
    *,
    max_tokens: int,
    pad_id: int,
    aggregation: str = "token_mean",
    share_prefix: bool = False,
) -> list[MicroBatch]:
    """All of a step's samples ([n]) with their advantages ([n]) as micro-batches of at most
    `max_tokens` tokens; `share_prefix` picks the shared-prefix layout (`train.share_prefix`).
    `MicroBatch.sample_index` refers to positions in `samples`."""
    seqs = Sequences(
        [s.prompt_ids for s in samples],
        [s.response_ids for s in samples],
        [s.logprobs for s in samples],
        np.asarray(advantages, dtype=np.float64),
    )
    return pack(seqs, max_tokens=max_tokens, pad_id=pad_id, aggregation=aggregation, share_prefix=share_prefix)


def pair_microbatches(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], *, max_tokens: int, pad_id: int, share_prefix: bool = False
) -> list[MicroBatch]:
    """(prompt ids, response ids) pairs as micro-batches, for losses that read only the tokens and the
    loss mask (supervised warm start, log-prob checks): advantage 1, behaviour log-prob 0."""
    seqs = Sequences(
        [p for p, _ in pairs], [r for _, r in pairs], [[0.0] * len(r) for _, r in pairs], np.ones(len(pairs))
    )
    return pack(seqs, max_tokens=max_tokens, pad_id=pad_id, aggregation="token_mean", share_prefix=share_prefix)


def pack(seqs: Sequences, *, max_tokens: int, pad_id: int, aggregation: str, share_prefix: bool) -> list[MicroBatch]:
    """`seqs` as micro-batches in the layout asked for (see the module docstring)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    n = len(seqs.prompts)
    if seqs.advantages.shape != (n,) or not np.isfinite(seqs.advantages).all():
        raise ValueError(
            f"need one finite advantage per sample: {n} samples, advantages of shape {seqs.advantages.shape}"
        )
    if share_prefix:
        return pack_shared_prefix(seqs, max_tokens=max_tokens, pad_id=pad_id, aggregation=aggregation)
    if n == 0:
        return []
    return _pack_plain(seqs, max_tokens, pad_id, aggregation)


def _pack_plain(seqs: Sequences, max_tokens: int, pad_id: int, aggregation: str) -> list[MicroBatch]:
    prompt_lens = np.fromiter((len(p) for p in seqs.prompts), dtype=np.int64, count=len(seqs.prompts))
    lengths = prompt_lens + np.fromiter((len(r) for r in seqs.responses), dtype=np.int64, count=len(seqs.responses))
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.fromiter(
        (t for p, r in zip(seqs.prompts, seqs.responses) for t in (*p, *r)), dtype=np.int64, count=int(offsets[-1])
    )
    out = []
    for idx in kernels.plan_microbatches(lengths, max_tokens):
        padded = kernels.pad_batch(tokens, offsets, prompt_lens, seqs.advantages, idx, pad_id=pad_id)
        out.append(
            finish(
                padded.input_ids,
                padded.attention_mask,
                padded.loss_mask,
                padded.token_advantages,
                seqs,
                idx.tolist(),
                aggregation,
            )
        )
    return out


__all__ = [
    "AGGREGATIONS",
    "MicroBatch",
    "Sequences",
    "SharedPrefix",
    "build_microbatches",
    "loss_normalizer",
    "pack",
    "pair_microbatches",
    "token_weights",
]
