"""Token-level PPO clipped surrogate (AT-GRPO's policy loss) as pure tensor math.

No model is called here: `learner.logprobs.loss_inputs` runs the forward pass and hands this module
`LossInputs`, every tensor [B, T] over the same token columns. Per token t, with `old_t` the
log-prob the ratio is measured against:

    strict on-policy (`is_cap` None):   old_t = behaviour_logp_t,  w_t = 1
    decoupled (`is_cap` set, the `max_staleness > 0` mode; AReaL's decoupled PPO):
        old_t = prox_logp_t (the proximal policy: the learner before the step's first update),
                or stopgrad(logp_t) when there is none (the first mini-batch: the learner is it)
        w_t   = min(exp(old_t - behaviour_logp_t), is_cap)         (truncated importance weight)
    log_ratio_t = logp_t - old_t                                     `ratio_level = "token"`
    log_ratio_t = sum_u m_u (logp_u - old_u) / sum_u m_u over t's row   "sequence" (GSPO; m = weights > 0)
    ratio_t     = exp(log_ratio_t)
    loss_t      = -min(ratio_t * A_t, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A_t) * w_t
                  - entropy_coef * H_t                            (when `entropy_coef`)
                  + kl_coef * (exp(r_t) - r_t - 1), r_t = ref_logp_t - logp_t   (k3 estimator, >= 0)
    loss        = sum_t token_weights_t * loss_t / total_tokens

With one mini-batch the decoupled ratio is 1 in value and carries only the gradient of the current
policy; with several, the later ones are clipped against the proximal policy, so the step's updates
stay in a trust region however stale the samples were. A sequence-level ratio is the same for
every token of a row, so its clip acts per sample; its gradient reaches every token of the row.

`total_tokens` is the step's normalizer over all micro-batches and ranks (`batching.loss_normalizer`:
response tokens for "token_mean", samples for "seq_mean", samples x the response budget for
"seq_mean_token_sum"), so the micro-batch losses of a step sum to its mean however the step is
split. Masked tokens have `token_weights` 0 and contribute nothing to the loss or to any metric.
Metric sums are weighted the same way; dividing them by `total_tokens` gives the step's metrics
(`loss`, `clip_frac`, `logprob_mismatch`, `is_weight`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class LossConfig:
    clip_eps_low: float = 0.2
    """Lower side of the PPO clip range: the ratio is clipped to [1 - clip_eps_low, 1 + clip_eps_high]."""
    clip_eps_high: float = 0.2
    """Upper side of the clip range (DAPO's clip-higher sets it above `clip_eps_low`)."""
    temperature: float = 1.0
    """The sampling temperature: the forward pass divides logits by it, as the engine did."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss); 0 turns it off."""
    kl_coef: float = 0.0
    """Weight of the k3 KL estimate to the reference (initial) policy; 0 turns it off."""
    is_cap: float | None = None
    """Truncated importance-sampling cap; None in strict on-policy mode."""
    ratio_level: str = "token"
    """"token": a ratio per token; "sequence": GSPO's length-normalised ratio per sample."""


@dataclass(frozen=True)
class LossInputs:
    """One micro-batch's per-token inputs, all [B, T] float32 on one device."""

    logp: torch.Tensor
    """[B, T] the learner's log-probability of each token (carries the gradient)."""
    behaviour_logp: torch.Tensor
    """[B, T] the engine's log-probability of each token when it was sampled."""
    advantages: torch.Tensor
    """[B, T] the token's advantage (its sample's)."""
    token_weights: torch.Tensor
    """[B, T] the token's weight in the step loss: 0 off the loss mask, else 1 ("token_mean",
    "seq_mean_token_sum") or 1 / response length ("seq_mean"); > 0 exactly on response tokens."""
    prox_logp: torch.Tensor | None = None
    """[B, T] the proximal policy's log-probability of each token (no gradient), in the decoupled
    mode when it is not the learner itself (`learner.proximal`); None: stopgrad(logp)."""
    entropy: torch.Tensor | None = None
    """[B, T] entropy of the learner's distribution at each token; needed when `entropy_coef` is set."""
    ref_logp: torch.Tensor | None = None
    """[B, T] the reference model's log-probability of each token; needed when `kl_coef` is set."""


@dataclass(frozen=True)
class LossOutputs:
    loss: torch.Tensor
    """[] this micro-batch's share of the step loss (backward on it)."""
    loss_sum: float
    """Weighted sum of the per-token losses."""
    clip_frac_sum: float
    """Weighted count of tokens whose ratio lies outside the clip range."""
    logprob_mismatch_sum: float
    """Weighted sum of |logp - behaviour_logp|."""
    is_weight_sum: float
    """Weighted sum of the importance weights w_t (1 per token in strict mode)."""

    def sums(self) -> dict[str, float]:
        """The metric sums by name (`<metric>_sum`); divide by `total_tokens` for the step's metrics."""
        return {
            "loss_sum": self.loss_sum,
            "clip_frac_sum": self.clip_frac_sum,
            "logprob_mismatch_sum": self.logprob_mismatch_sum,
            "is_weight_sum": self.is_weight_sum,
        }


def ppo_clip_loss(inputs: LossInputs, cfg: LossConfig, total_tokens: int) -> LossOutputs:
    """The clipped surrogate of `inputs` ([B, T] each) divided by `total_tokens` (see the module
    docstring for the formula), and its metric sums."""
    logp, behaviour, adv, mask = inputs.logp, inputs.behaviour_logp, inputs.advantages, inputs.token_weights
    if cfg.is_cap is None:
        old = behaviour
        weight = torch.ones_like(logp)
    else:
        old = inputs.prox_logp if inputs.prox_logp is not None else logp.detach()
        weight = torch.exp(old - behaviour).clamp(max=cfg.is_cap)
    log_ratio = logp - old
    if cfg.ratio_level == "sequence":
        log_ratio = _sequence_log_ratio(log_ratio, mask)
    elif cfg.ratio_level != "token":
        raise ValueError(f"ratio_level must be 'token' or 'sequence', got {cfg.ratio_level!r}")
    ratio = torch.exp(log_ratio)
    low, high = cfg.clip_eps_low, cfg.clip_eps_high
    clipped = ratio.clamp(1.0 - low, 1.0 + high)
    per_token = -torch.minimum(ratio * adv, clipped * adv) * weight
    if cfg.entropy_coef:
        if inputs.entropy is None:
            raise ValueError("entropy_coef is set but LossInputs.entropy is None")
        per_token = per_token - cfg.entropy_coef * inputs.entropy
    if cfg.kl_coef:
        if inputs.ref_logp is None:
            raise ValueError("kl_coef is set but LossInputs.ref_logp is None")
        log_r = inputs.ref_logp - logp
        per_token = per_token + cfg.kl_coef * (torch.exp(log_r) - log_r - 1.0)
    weighted = per_token * mask
    loss = weighted.sum() / max(total_tokens, 1)
    with torch.no_grad():
        return LossOutputs(
            loss=loss,
            loss_sum=float(weighted.sum()),
            # ratio - 1 and 1 - ratio round alike, so with low == high this is |ratio - 1| > eps
            clip_frac_sum=float((((ratio - 1.0 > high) | (1.0 - ratio > low)).float() * mask).sum()),
            logprob_mismatch_sum=float(((logp - behaviour).abs() * mask).sum()),
            is_weight_sum=float((weight * mask).sum()),
        )


def _sequence_log_ratio(log_ratio: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """[B, T]: each row's mean log-ratio over its response tokens (`weights` > 0), on every column
    (GSPO's log s_i). A row without response tokens gets 0."""
    on = (weights > 0).to(log_ratio.dtype)
    per_row = (log_ratio * on).sum(-1, keepdim=True) / on.sum(-1, keepdim=True).clamp(min=1.0)
    return per_row.expand_as(log_ratio)


__all__ = ["LossConfig", "LossInputs", "LossOutputs", "ppo_clip_loss"]
