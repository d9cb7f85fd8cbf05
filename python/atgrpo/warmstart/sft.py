"""Supervised warm start: cross-entropy on response tokens of (prompt ids, response ids) pairs.

Runs before RL step 0 so that a freshly built model knows the answer format and is a weak, not a
random, policy. The demonstrations come from a callable (`make_pairs(step)`), so this module knows
nothing of workflows or tasks. Batches go through the learner's one packing path
(`batching.pair_microbatches`, one micro-batch per step) and its forward pass
(`logprobs.token_logprobs` at temperature 1). Deterministic for a given torch seed and demo source.
The model is trained in place and left in eval mode.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

import torch

from atgrpo.devices import model_device
from atgrpo.learner.batching import pair_microbatches
from atgrpo.learner.logprobs import token_logprobs

Pair = tuple[Sequence[int], Sequence[int]]
"""(prompt token ids, response token ids): one demonstration."""

GRAD_CLIP = 1.0


def warm_start(
    model: torch.nn.Module,
    make_pairs: Callable[[int], Sequence[Pair]],
    *,
    pad_id: int,
    steps: int,
    lr: float,
    answers_only: bool = False,
    on_step: Callable[[int, int, float], None] | None = None,
    params: Iterable[torch.nn.Parameter] | None = None,
    snapshot_at: Collection[int] = (),
    on_snapshot: Callable[[int], None] | None = None,
) -> list[float]:
    """Train `model` for `steps` AdamW steps, step s on the pairs `make_pairs(s)` (one batch);
    returns the loss per step (mean negative log-likelihood per response token).

    `on_step(step, steps, loss)` (step counted from 1) is called after the first and last steps and
    about eight times between (every 25 steps at most), for progress reports.

    `answers_only`: the shared-prefix layout, which computes logits at response positions only
    (worth it with a real vocabulary: ~49k logits per prompt position otherwise). Same loss up to
    float rounding.

    `params`: the parameters trained (default: all of `model`'s); a LoRA policy's adapter, whose
    base and sibling adapters then get no update and no optimizer state.

    `on_snapshot(n)` is called once `n` updates are done, for each `n` in `snapshot_at` from 0 to
    `steps`: a sweep reads the model at several step counts from one run (the same models as
    shorter runs, since the demos and the lr do not depend on `steps`)."""
    if steps <= 0:
        return []
    trained = list(model.parameters() if params is None else params)
    opt = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for step in range(steps):
        if step in snapshot_at and on_snapshot is not None:
            on_snapshot(step)
        (mb,) = pair_microbatches(make_pairs(step), max_tokens=10**9, pad_id=pad_id, share_prefix=answers_only)
        mb = mb.to(model_device(model))
        logp, _ = token_logprobs(model, mb, 1.0)
        mask = mb.loss_mask[:, 1:].float()
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, GRAD_CLIP)
        opt.step()
        losses.append(loss.item())
        if on_step is not None and (step % min(25, max(1, steps // 8)) == 0 or step == steps - 1):
            on_step(step + 1, steps, losses[-1])
    if steps in snapshot_at and on_snapshot is not None:
        on_snapshot(steps)
    model.eval()
    return losses


__all__ = ["Pair", "warm_start"]
