"""The loss settings of issue 49 against values worked out by hand: the clip-higher range, the
proximal policy of the decoupled mode, GSPO's sequence-level ratio and Dr. GRPO's constant
normaliser; and, with all of them off, the loss of before them, bit for bit.

Tolerances as in test_loss.py (fp32 rounding of a handful of operations, no long sums): rtol 1e-6,
atol 1e-7. The bit-identical check compares the same torch operations in the same order, so it
holds on any CPU, whatever its vector width.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from test_loss import close, inputs, t

from atgrpo.learner.batching import build_microbatches, loss_normalizer
from atgrpo.learner.loss import LossConfig, LossInputs, ppo_clip_loss
from atgrpo.messages import GroupKey, Sample

LN = math.log


def test_clip_higher_widens_only_the_upper_side():
    # ratios 1.25, 1.3 (A +2) and 0.75, 0.85 (A -1); range [1 - 0.2, 1 + 0.28] = [0.8, 1.28]
    x, logp = inputs(t([LN(1.25), LN(1.3), LN(0.75), LN(0.85)]), t([0.0] * 4), t([2.0, 2.0, -1.0, -1.0]), t([1.0] * 4))
    out = ppo_clip_loss(x, LossConfig(clip_eps_low=0.2, clip_eps_high=0.28), total_tokens=4)
    # r 1.25, A +2: inside (symmetric 0.2 would clip it) -> -2.5
    # r 1.3,  A +2: above 1.28 -> -min(2.6, 2.56) = -2.56
    # r 0.75, A -1: below 0.8  -> -min(-0.75, -0.8) = +0.8
    # r 0.85, A -1: inside     -> +0.85
    # sum -3.41; / 4 = -0.8525
    close(out.loss, -0.8525)
    close(out.clip_frac_sum, 2.0)  # 1.3 and 0.75; 1.25 is inside the widened range
    out.loss.backward()
    # -r A / 4 where not clipped: -1.25 * 2 / 4 = -0.625 and -0.85 * -1 / 4 = 0.2125
    close(logp.grad, t([-0.625, 0.0, 0.0, 0.2125]))


def test_decoupled_ratio_is_measured_against_the_proximal_policy():
    # logp ln 0.6, ln 0.525; proximal ln 0.5 both -> ratios 1.2, 1.05; behaviour ln 0.25, ln 0.1
    # -> pi_prox / pi_behaviour = 2, 5; cap 3 -> w = 2, 3
    prox = t([LN(0.5), LN(0.5)])
    x, logp = inputs(t([LN(0.6), LN(0.525)]), t([LN(0.25), LN(0.1)]), t([1.0, 1.0]), t([1.0, 1.0]), prox_logp=prox)
    out = ppo_clip_loss(x, LossConfig(clip_eps_low=0.1, clip_eps_high=0.1, is_cap=3.0), total_tokens=2)
    # r 1.2 > 1.1, A +1: -min(1.2, 1.1) * 2 = -2.2;  r 1.05 inside: -1.05 * 3 = -3.15; / 2
    close(out.loss, -5.35 / 2.0)
    close(out.clip_frac_sum, 1.0)
    close(out.is_weight_sum, 5.0)
    out.loss.backward()
    # clipped: 0; inside: d(-r A w)/dlogp = -r A w = -3.15, / 2
    close(logp.grad, t([0.0, -1.575]))


def test_decoupled_without_a_proximal_policy_is_the_learner_itself():
    # prox_logp None: ratio exp(logp - stopgrad(logp)) = 1, w = min(exp(logp - behaviour), cap)
    x, _ = inputs(t([LN(0.6)]), t([LN(0.25)]), t([1.0]), t([1.0]))
    out = ppo_clip_loss(x, LossConfig(is_cap=3.0), total_tokens=1)
    close(out.loss, -2.4)  # -(1 * 1) * 0.6 / 0.25
    close(out.clip_frac_sum, 0.0)


def test_sequence_ratio_is_the_length_normalised_product_per_sample():
    # row 0: tokens of ratios 1.1, 1.5 (A +1, seq_mean weights 1/2): s = sqrt(1.1 * 1.5) = 1.28452326
    # row 1: one token of ratio 0.9 (A -1, weight 1), then padding with absurd values (weight 0)
    x, logp = inputs(
        t([LN(1.1), LN(1.5)], [LN(0.9), 7.0]),
        t([0.0, 0.0], [0.0, -9.0]),
        t([1.0, 1.0], [-1.0, 50.0]),
        t([0.5, 0.5], [1.0, 0.0]),
    )
    out = ppo_clip_loss(x, LossConfig(clip_eps_low=0.2, clip_eps_high=0.3, ratio_level="sequence"), total_tokens=2)
    s = math.sqrt(1.65)
    # s inside [0.8, 1.3]: row 0 loses -s (its two half-weighted tokens), row 1 +0.9; / 2 samples
    close(out.loss, (-s + 0.9) / 2.0)
    close(out.clip_frac_sum, 0.0)
    out.loss.backward()
    # row 0: each token's logp moves s by s / 2 (the mean over 2 tokens): -A * s / 2 over both
    # weights (1/2 + 1/2), / 2 samples = -s / 4 each; row 1: -A * 0.9 / 2 = 0.45; padding 0
    close(logp.grad, t([-s / 4.0, -s / 4.0], [0.45, 0.0]))


def test_sequence_ratio_clips_the_whole_sample():
    # ratios 1.1, 1.5, A +1, range [0.8, 1.2]: per token only 1.5 is clipped; per sample
    # s = 1.28452326 > 1.2 clips both tokens
    logp, zeros, ones = t([LN(1.1), LN(1.5)]), t([0.0, 0.0]), t([1.0, 1.0])
    x, _ = inputs(logp, zeros, ones, ones)
    close(ppo_clip_loss(x, LossConfig(), total_tokens=2).clip_frac_sum, 1.0)
    x, grad_leaf = inputs(logp, zeros, ones, ones)
    out = ppo_clip_loss(x, LossConfig(ratio_level="sequence"), total_tokens=2)
    close(out.clip_frac_sum, 2.0)
    close(out.loss, -1.2)  # -min(s, 1.2) on both tokens, / 2
    out.loss.backward()
    close(grad_leaf.grad, t([0.0, 0.0]))


def sample(env: int, branch: int, response: list[int], reward: float) -> Sample:
    key = GroupKey(env, 0, 0)
    return Sample("r", "shared", 0, 0, "plan", key, [1, 2], response, [-0.5] * len(response), reward, 0.0, reward)


def test_seq_mean_token_sum_divides_by_samples_times_the_budget():
    samples = [sample(0, 0, [3, 4], 1.0), sample(0, 1, [5, 6, 7], 0.0)]
    assert loss_normalizer(samples, "seq_mean_token_sum", response_budget=8) == 16
    (mb,) = build_microbatches(
        samples, np.array([1.0, -1.0]), max_tokens=64, pad_id=0, aggregation="seq_mean_token_sum"
    )
    # every response token weighs 1, as in token_mean: the constant normaliser does the rest
    assert mb.token_weights.sum().item() == 5.0
    # ratio 1: token loss -A; 2 tokens of A +1, 3 of A -1: -2 + 3 = 1; / (2 samples * 8)
    x = LossInputs(
        logp=mb.behaviour_logprobs[:, 1:].clone().requires_grad_(True),
        behaviour_logp=mb.behaviour_logprobs[:, 1:],
        advantages=mb.advantages[:, 1:],
        token_weights=mb.token_weights[:, 1:],
    )
    close(ppo_clip_loss(x, LossConfig(), total_tokens=16).loss, 1.0 / 16.0)


def loss_before_issue_49(x: LossInputs, eps: float, is_cap: float | None, total: int):
    """The loss as it was written before issue 49 (the same operations, in the same order)."""
    logp, behaviour, adv, mask = x.logp, x.behaviour_logp, x.advantages, x.token_weights
    if is_cap is None:
        ratio = torch.exp(logp - behaviour)
        weight = torch.ones_like(logp)
    else:
        ratio = torch.exp(logp - logp.detach())
        weight = torch.exp(logp.detach() - behaviour).clamp(max=is_cap)
    clipped = ratio.clamp(1.0 - eps, 1.0 + eps)
    weighted = -torch.minimum(ratio * adv, clipped * adv) * weight * mask
    clip_frac = float((((ratio - 1.0).abs() > eps).float() * mask).sum())
    return weighted.sum() / total, clip_frac, float((weight * mask).sum())


def test_with_every_new_setting_off_the_loss_is_bit_identical_to_before():
    gen = torch.Generator().manual_seed(0)
    shape = (4, 7)
    base = torch.randn(shape, generator=gen) * 0.3 - 1.0
    behaviour = base + torch.randn(shape, generator=gen) * 0.3
    adv = torch.randn(shape, generator=gen)
    mask = (torch.rand(shape, generator=gen) > 0.2).float()
    for is_cap in (None, 2.0):
        new_leaf, old_leaf = base.clone().requires_grad_(True), base.clone().requires_grad_(True)
        new = ppo_clip_loss(LossInputs(new_leaf, behaviour, adv, mask), LossConfig(is_cap=is_cap), total_tokens=23)
        old_loss, old_clip, old_weight = loss_before_issue_49(
            LossInputs(old_leaf, behaviour, adv, mask), 0.2, is_cap, 23
        )
        assert torch.equal(new.loss, old_loss)
        assert new.clip_frac_sum == old_clip and new.is_weight_sum == old_weight
        new.loss.backward()
        old_loss.backward()
        assert torch.equal(new_leaf.grad, old_leaf.grad)
