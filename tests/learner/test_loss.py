"""`ppo_clip_loss` and the forward pass's log-probs against values worked out by hand.

Inputs are small fp32 tensors whose ratios are chosen numbers (logp = ln r, behaviour 0, so
ratio = r up to one rounding of ln and one of exp). Tolerances come from fp32 rounding of a few
operations (machine epsilon 1.2e-7): rtol 1e-6, and atol 1e-7 where the expected value is 0. They
do not depend on the CPU's vector width: every sum here has at most a handful of terms.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from atgrpo.learner.backends.base import finish_metrics
from atgrpo.learner.logprobs import entropy_from_logits, token_logprobs
from atgrpo.learner.loss import LossConfig, LossInputs, ppo_clip_loss
from atgrpo.learner.microbatch import MicroBatch

RTOL, ATOL = 1e-6, 1e-7
LN = math.log


def t(*rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def close(got: float | torch.Tensor, want) -> None:
    torch.testing.assert_close(
        torch.as_tensor(got, dtype=torch.float32), torch.as_tensor(want, dtype=torch.float32), rtol=RTOL, atol=ATOL
    )


def inputs(logp, behaviour, adv, weights, **extra) -> tuple[LossInputs, torch.Tensor]:
    """LossInputs with `logp` a leaf that records its gradient; returns (inputs, logp leaf)."""
    leaf = logp.clone().requires_grad_(True)
    return LossInputs(logp=leaf, behaviour_logp=behaviour, advantages=adv, token_weights=weights, **extra), leaf


def test_strict_ratio_inside_and_outside_the_clip_range():
    # ratios 1.1, 1.5, 0.5, 1.5 (behaviour 0, logp = ln r); clip 0.2 -> range [0.8, 1.2]
    x, logp = inputs(t([LN(1.1), LN(1.5), LN(0.5), LN(1.5)]), t([0.0] * 4), t([2.0, 2.0, -1.0, -1.0]), t([1.0] * 4))
    out = ppo_clip_loss(x, LossConfig(clip_eps_low=0.2, clip_eps_high=0.2), total_tokens=4)
    # token loss = -min(r * A, clip(r) * A):
    #   r 1.1, A +2: inside          -> -min(2.2, 2.2)   = -2.2
    #   r 1.5, A +2: above, clipped  -> -min(3.0, 2.4)   = -2.4
    #   r 0.5, A -1: below, clipped  -> -min(-0.5, -0.8) = +0.8
    #   r 1.5, A -1: above, not clipped (pessimistic side) -> -min(-1.5, -1.2) = +1.5
    # sum -2.2 - 2.4 + 0.8 + 1.5 = -2.3; over 4 tokens -0.575
    close(out.loss, -0.575)
    close(out.loss_sum, -2.3)
    # |r - 1| > 0.2 for r = 1.5, 0.5, 1.5 (the metric counts the ratio, clipped in the objective or not)
    close(out.clip_frac_sum, 3.0)
    # |ln 1.1| + |ln 1.5| + |ln 0.5| + |ln 1.5| = 0.09531018 + 0.40546511 + 0.69314718 + 0.40546511
    close(out.logprob_mismatch_sum, 1.59938758)
    close(out.is_weight_sum, 4.0)
    out.loss.backward()
    # d(-r A)/d logp = -r A where not clipped (dr/dlogp = r), 0 where clipped; divided by 4:
    # (-1.1 * 2) / 4 = -0.55, 0, 0, (-1.5 * -1) / 4 = 0.375
    close(logp.grad, t([-0.55, 0.0, 0.0, 0.375]))


def test_masked_tokens_contribute_nothing():
    # the first two tokens as above (-2.2, -2.4), then a padded token with absurd values and weight 0
    x, logp = inputs(t([LN(1.1), LN(1.5), 5.0]), t([0.0, 0.0, -30.0]), t([2.0, 2.0, 100.0]), t([1.0, 1.0, 0.0]))
    out = ppo_clip_loss(x, LossConfig(), total_tokens=2)
    close(out.loss, -2.3)  # (-2.2 - 2.4) / 2
    close(out.clip_frac_sum, 1.0)  # only r = 1.5
    close(out.logprob_mismatch_sum, 0.50077529)  # 0.09531018 + 0.40546511
    close(out.is_weight_sum, 2.0)
    out.loss.backward()
    close(logp.grad, t([-1.1, 0.0, 0.0]))  # -1.1 * 2 / 2; the clipped and the masked token: 0


def test_token_mean_divides_by_the_steps_token_count():
    # ratio 1 everywhere (inside the range): token loss = -A
    x, _ = inputs(
        t([0.0, 0.0], [0.0, 0.0]), t([0.0, 0.0], [0.0, 0.0]), t([1.0, 1.0], [-4.0, 0.0]), t([1.0, 1.0], [1.0, 0.0])
    )
    # -1 - 1 + 4 = 2 over this micro-batch's 3 tokens
    close(ppo_clip_loss(x, LossConfig(), total_tokens=3).loss, 2.0 / 3.0)
    # the step has 10 tokens in all (other micro-batches, other ranks): this share is 2 / 10
    close(ppo_clip_loss(x, LossConfig(), total_tokens=10).loss, 0.2)
    # an empty step divides by 1, not 0
    close(ppo_clip_loss(x, LossConfig(), total_tokens=0).loss, 2.0)


def test_seq_mean_weights_count_each_sample_once():
    # sample 0 has 2 tokens (weight 1/2 each), sample 1 one token (weight 1); normalizer = 2 samples
    x, _ = inputs(
        t([0.0, 0.0], [0.0, 0.0]), t([0.0, 0.0], [0.0, 0.0]), t([1.0, 1.0], [-4.0, 0.0]), t([0.5, 0.5], [1.0, 0.0])
    )
    out = ppo_clip_loss(x, LossConfig(), total_tokens=2)
    # 0.5 * -1 + 0.5 * -1 + 1 * 4 = 3; / 2 samples = 1.5
    close(out.loss, 1.5)
    close(out.is_weight_sum, 2.0)  # weights summed: one per sample


def test_is_cap_weights_are_truncated_and_the_ratio_is_one():
    # logp 0, behaviour ln 2, ln 0.5, ln 0.25 -> exp(logp - behaviour) = 0.5, 2, 4; cap 3 -> w = 0.5, 2, 3
    x, logp = inputs(t([0.0, 0.0, 0.0]), t([LN(2.0), LN(0.5), LN(0.25)]), t([1.0, 1.0, 1.0]), t([1.0, 1.0, 1.0]))
    out = ppo_clip_loss(x, LossConfig(is_cap=3.0), total_tokens=3)
    # ratio = exp(logp - stopgrad(logp)) = 1 (inside the range): token loss = -A * w
    # -(0.5 + 2 + 3) = -5.5; / 3 = -1.83333333
    close(out.loss, -5.5 / 3.0)
    close(out.is_weight_sum, 5.5)
    close(out.clip_frac_sum, 0.0)
    close(out.logprob_mismatch_sum, 2.77258872)  # ln 2 + ln 2 + ln 4 = 0.69314718 * 4
    out.loss.backward()
    # d/dlogp of -ratio * A * w with dratio/dlogp = 1 and w constant: -w / 3
    close(logp.grad, t([-0.5 / 3.0, -2.0 / 3.0, -1.0]))


def test_is_cap_ratio_is_clipped_only_by_its_gradient_not_its_value():
    # behaviour far below logp: w = min(exp(3), 1.5) = 1.5; the ratio is still 1, never outside [0.8, 1.2]
    x, _ = inputs(t([-1.0]), t([-4.0]), t([-2.0]), t([1.0]))
    out = ppo_clip_loss(x, LossConfig(is_cap=1.5), total_tokens=1)
    close(out.loss, 3.0)  # -(1 * -2) * 1.5
    close(out.clip_frac_sum, 0.0)
    close(out.logprob_mismatch_sum, 3.0)


def test_k3_kl_to_the_reference():
    # logp 0; ref_logp ln 2, -ln 2, 0 -> r = ref - logp; k3 = exp(r) - r - 1:
    #   2 - 0.69314718 - 1 = 0.30685282;  0.5 + 0.69314718 - 1 = 0.19314718;  1 - 0 - 1 = 0
    zeros = t([0.0, 0.0, 0.0])
    x, logp = inputs(zeros, zeros, zeros, t([1.0, 1.0, 1.0]), ref_logp=t([LN(2.0), -LN(2.0), 0.0]))
    out = ppo_clip_loss(x, LossConfig(kl_coef=0.5), total_tokens=3)
    # advantages 0: only the KL term; 0.5 * (0.30685282 + 0.19314718 + 0) = 0.25; / 3
    close(out.loss_sum, 0.25)
    close(out.loss, 0.25 / 3.0)
    out.loss.backward()
    # d k3 / d logp = 1 - exp(ref - logp): 1 - 2 = -1, 1 - 0.5 = 0.5, 0; times 0.5 / 3
    close(logp.grad, t([-1.0 / 6.0, 1.0 / 12.0, 0.0]))


def test_entropy_bonus_is_subtracted():
    zeros = t([0.0, 0.0, 0.0])
    x, _ = inputs(zeros, zeros, zeros, t([1.0, 1.0, 0.0]), entropy=t([1.0, 2.0, 50.0]))
    out = ppo_clip_loss(x, LossConfig(entropy_coef=0.1), total_tokens=2)
    # -0.1 * (1 + 2) = -0.3 (the masked token's entropy does not count); / 2 = -0.15
    close(out.loss_sum, -0.3)
    close(out.loss, -0.15)


def test_an_enabled_term_without_its_input_is_an_error():
    x, _ = inputs(t([0.0]), t([0.0]), t([1.0]), t([1.0]))
    with pytest.raises(ValueError, match="entropy"):
        ppo_clip_loss(x, LossConfig(entropy_coef=0.1), total_tokens=1)
    with pytest.raises(ValueError, match="ref_logp"):
        ppo_clip_loss(x, LossConfig(kl_coef=0.1), total_tokens=1)


def test_entropy_from_logits():
    # uniform over 4: ln 4 = 1.38629436; logits (0, ln 3): p = (1/4, 3/4),
    # H = 1/4 ln 4 + 3/4 ln(4/3) = 0.34657359 + 0.21576155 = 0.56233514
    close(entropy_from_logits(torch.zeros(1, 1, 4)), t([1.38629436]))
    close(entropy_from_logits(torch.tensor([[[0.0, LN(3.0)]]])), t([0.56233514]))


class ConstantLogits(torch.nn.Module):
    """A 'model' whose next-token logits are (0, ln 3) at every position: p = (1/4, 3/4)."""

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        b, length = input_ids.shape
        return SimpleNamespace(logits=torch.tensor([0.0, LN(3.0)]).expand(b, length, 2))


def test_token_logprobs_shift_by_one_and_divide_by_the_temperature():
    ids = torch.tensor([[0, 1, 0]])
    ones = torch.ones_like(ids)
    mb = MicroBatch(ids, ones, ones.bool(), ones.float(), ones.float(), ones.float())
    logp, _ = token_logprobs(ConstantLogits(), mb, temperature=1.0)
    # tokens 1 then 0 (positions 1, 2): ln 3/4 = -0.28768207, ln 1/4 = -1.38629436
    close(logp, t([-0.28768207, -1.38629436]))
    logp, _ = token_logprobs(ConstantLogits(), mb, temperature=0.5)
    # logits (0, 2 ln 3): p = (1/10, 9/10); ln 0.9 = -0.10536052, ln 0.1 = -2.30258509
    close(logp, t([-0.10536052, -2.30258509]))


def test_metrics_are_the_sums_over_the_steps_tokens():
    sums = {"loss_sum": -2.3, "clip_frac_sum": 3.0, "logprob_mismatch_sum": 1.5, "is_weight_sum": 4.0}
    m = finish_metrics(sums, total_tokens=4, grad_norm=0.5)
    assert m == pytest.approx(
        {
            "loss": -0.575,
            "clip_frac": 0.75,
            "logprob_mismatch": 0.375,
            "is_weight": 1.0,
            "grad_norm": 0.5,
            "tokens": 4.0,
        },
        rel=1e-12,
    )
