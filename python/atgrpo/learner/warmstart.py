"""Supervised warm start on solver demonstrations: cross-entropy on response tokens only.

Runs in the learner before RL step 0 so that a freshly built model knows the answer format and is a
weak, not a random, policy. Deterministic for a given seed.
"""

from __future__ import annotations

import numpy as np
import torch

from atgrpo.learner.shared_prefix import microbatch_builder
from atgrpo.learner.loss import token_logprobs
from atgrpo.messages import GroupKey, Sample
from atgrpo.workflows.demos import make_demos
from atgrpo.workflows.games import GameWorkflow


def warm_start(
    model: torch.nn.Module, tokenizer, wf: GameWorkflow, *, steps: int, batch_size: int, lr: float, tool_noise: float, seed: int, log=None,
    roles: list[str] | None = None, answers_only: bool = False,
) -> list[float]:
    """Train `model` in place for `steps` steps on the demos of `roles` (default: all); returns the loss per step.

    `answers_only`: compute logits at answer positions only (the shared-prefix layout), which a real
    model's vocabulary makes worth it (49k logits per prompt position otherwise). Same loss up to
    float rounding; the built tiny model keeps the full layout its demo figures were measured with."""
    if steps <= 0:
        return []
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    losses = []
    for step in range(steps):
        pairs = make_demos(
            wf, tokenizer, batch_size, start=step * batch_size, tool_noise=tool_noise, seed=seed, roles=roles
        )
        samples = [
            Sample("", "", 0, 0, "", GroupKey(0, 0, 0), p, r, [0.0] * len(r), 0.0, 0.0, 0.0) for p, r in pairs
        ]
        (mb,) = microbatch_builder(answers_only)(samples, np.ones(len(samples)), max_tokens=10**9, pad_id=tokenizer.pad_token_id)
        logp, _ = token_logprobs(model, mb, 1.0)
        mask = mb.loss_mask[:, 1:].float()
        loss = -(logp * mask).sum() / mask.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if log is not None and (step % min(25, max(1, steps // 8)) == 0 or step == steps - 1):
            log(f"warm start step {step + 1}/{steps} loss {losses[-1]:.3f}")
    model.eval()
    return losses
