"""Token-level PPO clipped surrogate (AT-GRPO's policy loss), aggregated as a token mean over the step.

For each response token: `ratio = exp(logp - logp_old)`, loss `-min(ratio * A, clip(ratio, 1-eps,
1+eps) * A)`. In strict on-policy mode `logp_old` is the behaviour log-probability the engine
recorded. With `is_cap` set (the `max_staleness > 0` mode) the loss is decoupled: the ratio is taken
against the learner's own current log-probability (the proximal policy), and each token is weighted
by the truncated importance ratio `min(exp(logp_prox - logp_behaviour), is_cap)`.

`total_tokens` is the step's normalizer (all micro-batches, all ranks): its response-token count for
token-mean aggregation, its sample count for sequence-mean (see `batching.loss_normalizer`). Token
losses are weighted by `MicroBatch.token_weights` and divided by it, so summing the micro-batch
losses gives the step's mean however the step is split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from atgrpo.learner.batching import MicroBatch
from atgrpo.learner.shared_prefix import prefix_logits


@dataclass(frozen=True)
class LossConfig:
    clip_eps: float = 0.2
    temperature: float = 1.0
    """The sampling temperature: logits are divided by it, as the engine did."""
    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    is_cap: float | None = None
    """Truncated importance-sampling cap; None in strict on-policy mode."""


def token_logprobs(model: torch.nn.Module, mb: MicroBatch, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, L-1] log-prob of each next token, [B, L-1] logits) for positions 0..L-2 of `input_ids`
    (either layout: the shared-prefix one runs each distinct prompt once)."""
    if mb.prefix_ids is None:
        logits = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits[:, :-1]
    else:
        logits = prefix_logits(model, mb)[:, :-1]
    logits = logits.float() / temperature
    logp = torch.gather(F.log_softmax(logits, dim=-1), -1, mb.input_ids[:, 1:, None]).squeeze(-1)
    return logp, logits


def policy_loss(
    model: torch.nn.Module,
    mb: MicroBatch,
    cfg: LossConfig,
    total_tokens: int,
    ref_model: torch.nn.Module | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The micro-batch's share of the step loss, and its metric sums (divide by total_tokens)."""
    logp, logits = token_logprobs(model, mb, cfg.temperature)
    mask = mb.token_weights[:, 1:]
    adv = mb.advantages[:, 1:]
    behaviour = mb.behaviour_logprobs[:, 1:]
    if cfg.is_cap is None:
        ratio = torch.exp(logp - behaviour)
        weight = torch.ones_like(logp)
    else:
        ratio = torch.exp(logp - logp.detach())
        weight = torch.exp(logp.detach() - behaviour).clamp(max=cfg.is_cap)
    clipped = ratio.clamp(1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps)
    per_token = -torch.minimum(ratio * adv, clipped * adv) * weight
    if cfg.entropy_coef:
        probs = F.softmax(logits, dim=-1)
        entropy = -(probs * F.log_softmax(logits, dim=-1)).sum(-1)
        per_token = per_token - cfg.entropy_coef * entropy
    if cfg.kl_coef and ref_model is not None:
        with torch.no_grad():
            ref_logp, _ = token_logprobs(ref_model, mb, cfg.temperature)
        log_r = ref_logp - logp
        per_token = per_token + cfg.kl_coef * (torch.exp(log_r) - log_r - 1.0)  # k3 estimator, >= 0
    loss = (per_token * mask).sum() / max(total_tokens, 1)
    with torch.no_grad():
        stats = {
            "loss_sum": float((per_token * mask).sum()),
            "clip_frac_sum": float((((ratio - 1.0).abs() > cfg.clip_eps).float() * mask).sum()),
            "logprob_mismatch_sum": float(((logp - behaviour).abs() * mask).sum()),
            "is_weight_sum": float((weight * mask).sum()),
        }
    return loss, stats
