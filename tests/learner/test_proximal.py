"""A pipelined step of two mini-batches against an update worked out by hand (`learner.proximal`).

The model is a table of two logits, the same at every position, so each log-prob and each AdamW
step is a short closed form. Mini-batch 1 (one token, A +1) moves the logits by lr in AdamW's
first step (m_hat / sqrt(v_hat) = sign(g)); mini-batch 2 is then measured against the proximal
policy (the logits before the step) and clips. Without it the ratio would be 1 and nothing clips,
which is the bug issue 49 fixed. Tolerances: fp32 rounding of a few operations and AdamW's eps
(1e-8 against gradients of 0.5): rtol 1e-6.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from atgrpo.learner.backends.torch_backend import TorchBackend
from atgrpo.learner.loss import LossConfig
from atgrpo.learner.microbatch import MicroBatch
from atgrpo.learner.packing import OptimizerStep
from atgrpo.learner.proximal import train_policy_step

LR, BETA1, BETA2 = 0.5, 0.9, 0.999
LN = math.log


class LogitTable(torch.nn.Module):
    """Next-token logits `bias` at every position, whatever the input."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(2))

    def forward(self, input_ids, attention_mask=None, use_cache=False):
        b, length = input_ids.shape
        return SimpleNamespace(logits=self.bias.expand(b, length, 2))


def one_token(behaviour_logp: float, advantage: float = 1.0) -> MicroBatch:
    """A prompt token 0 and a response token 1."""
    row = lambda first, second: torch.tensor([[first, second]], dtype=torch.float32)  # noqa: E731
    return MicroBatch(
        input_ids=torch.tensor([[0, 1]]),
        attention_mask=torch.ones(1, 2, dtype=torch.int64),
        loss_mask=torch.tensor([[False, True]]),
        advantages=row(0.0, advantage),
        behaviour_logprobs=row(0.0, behaviour_logp),
        token_weights=row(0.0, 1.0),
    )


def backend(is_cap: float | None = 3.0) -> TorchBackend:
    cfg = LossConfig(is_cap=is_cap)
    return TorchBackend(LogitTable(), lr=LR, weight_decay=0.0, grad_clip=1.0, loss_cfg=cfg)


def two_minibatches() -> list[OptimizerStep]:
    # Mini-batch 1: behaviour ln 0.5 = the learner's (w = 1). Mini-batch 2: behaviour ln 0.25 (stale).
    return [OptimizerStep([one_token(LN(0.5))], 1), OptimizerStep([one_token(LN(0.25))], 1)]


def test_second_minibatch_is_clipped_against_the_proximal_policy():
    be = backend()
    metrics = train_policy_step(be, two_minibatches(), decoupled=True)
    assert metrics["proximal_pass"] == 1.0 and metrics["proximal_s"] >= 0.0
    # Update 1: d(-logp(1))/d bias = p - e_1 = (0.5, -0.5); AdamW's first step moves each logit by
    # lr against its gradient's sign: bias (-0.5, 0.5), so pi_theta(1) = sigmoid(1) = 0.73105858.
    p1 = 1.0 / (1.0 + math.exp(-1.0))
    # Mini-batch 2: ratio pi_theta / pi_prox = 0.73105858 / 0.5 = 1.46211716 > 1.2: clipped;
    # w = min(pi_prox / pi_behaviour, cap) = min(0.5 / 0.25, 3) = 2; loss -min(1.462, 1.2) * 2 = -2.4
    torch.testing.assert_close(metrics["clip_frac"], 1.0)
    torch.testing.assert_close(metrics["loss"], -2.4, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(metrics["is_weight"], 2.0, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(metrics["logprob_mismatch"], LN(p1) - LN(0.25), rtol=1e-6, atol=1e-7)
    # Update 2: the clipped token's gradient is 0, so AdamW moves by its momentum alone:
    # m_hat / sqrt(v_hat) = (BETA1 / (1 + BETA1)) / sqrt(BETA2 / (1 + BETA2)) = 0.67005979 of sign(g_1)
    second = (BETA1 / (1 + BETA1)) / math.sqrt(BETA2 / (1 + BETA2))
    want = torch.tensor([-LR * (1 + second), LR * (1 + second)])
    torch.testing.assert_close(be.model.bias.detach(), want, rtol=1e-6, atol=1e-7)


def test_without_the_proximal_policy_nothing_would_clip():
    # What the decoupled loss did before issue 49: the ratio is measured against the learner itself.
    be = backend()
    for st in two_minibatches():
        metrics = be.train_step(st.micro_batches, st.total_tokens)
    assert metrics["clip_frac"] == 0.0


def test_one_minibatch_skips_the_pass_and_is_the_update_without_it():
    steps = two_minibatches()[:1]
    with_pass, without = backend(), backend()
    metrics = train_policy_step(with_pass, steps, decoupled=True)
    assert metrics["proximal_pass"] == 0.0
    reference = without.train_step(steps[0].micro_batches, steps[0].total_tokens)
    assert torch.equal(with_pass.model.bias, without.model.bias)  # the same code path: bit for bit
    assert {k: v for k, v in metrics.items() if not k.startswith("proximal_")} == reference


def test_strict_mode_is_the_loop_of_before_bit_for_bit():
    new, old = backend(is_cap=None), backend(is_cap=None)
    metrics = train_policy_step(new, two_minibatches(), decoupled=False)
    for st in two_minibatches():  # the trainer's loop before issue 49
        reference = old.train_step(st.micro_batches, st.total_tokens)
    assert torch.equal(new.model.bias, old.model.bias) and metrics == reference


def test_strict_mode_reports_no_proximal_pass():
    be = backend(is_cap=None)
    metrics = train_policy_step(be, two_minibatches(), decoupled=False)
    assert "proximal_pass" not in metrics and "proximal_s" not in metrics


def test_score_is_the_forward_of_the_loss_without_a_gradient():
    be = backend()
    (logp,) = be.score([one_token(0.0)])
    assert not logp.requires_grad and logp.shape == (1, 1)
    torch.testing.assert_close(logp, torch.tensor([[LN(0.5)]]))
