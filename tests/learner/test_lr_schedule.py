"""The lr schedule: known values of each shape, the warm-up, the floor, the config's checks, and that
a backend's next update uses the lr it is given."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from atgrpo.config import load_config
from atgrpo.learner.backends import TorchBackend
from atgrpo.learner.loss import LossConfig
from atgrpo.learner.lr_schedule import lr_at


def test_constant_stays_at_the_peak_after_the_warm_up() -> None:
    assert [lr_at("constant", 2.0, 0.0, 0, v, 10) for v in (0, 5, 9, 50)] == [2.0] * 4
    assert [lr_at("constant", 2.0, 0.0, 4, v, 10) for v in range(5)] == [0.5, 1.0, 1.5, 2.0, 2.0]


def test_linear_falls_to_the_floor_at_the_horizon_and_stays() -> None:
    lrs = [lr_at("linear", 1.0, 0.2, 0, v, 4) for v in range(6)]
    assert lrs == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.2])  # updates 0-3 are taken; 4, 5: past the budget
    assert lr_at("linear", 1.0, 0.0, 0, 3, 4) > 0.0  # the last update of the run is not a no-op


def test_cosine_after_the_warm_up() -> None:
    # warm-up of 2, then half a cosine over the 4 remaining updates of a 6-update run
    got = [lr_at("cosine", 1.0, 0.0, 2, v, 6) for v in range(7)]
    want = [0.5, 1.0] + [0.5 * (1 + math.cos(math.pi * i / 4)) for i in range(4)] + [0.0]
    assert got == pytest.approx(want, abs=1e-15)


def test_an_unknown_schedule_and_a_floor_above_the_peak_are_refused() -> None:
    with pytest.raises(ValueError, match="lr schedule"):
        lr_at("step", 1.0, 0.0, 0, 0, 4)
    with pytest.raises(ValidationError, match="lr_min"):
        load_config(None, ["policies.shared.lr=1e-4", "policies.shared.lr_min=2e-4"])
    with pytest.raises(ValidationError):
        load_config(None, ['policies.shared.lr_schedule="step"'])


def test_the_backends_next_update_uses_the_lr_it_is_given() -> None:
    """Under a constant gradient Adam's bias-corrected update is lr * sign(g) (up to eps) on every
    step, so each step moves every weight by the lr set before it: 0, then 1e-3."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    be = TorchBackend(model, lr=1.0, weight_decay=0.0, grad_clip=1.0, loss_cfg=LossConfig())
    for lr in (0.0, 1e-3):
        before = [p.detach().clone() for p in model.parameters()]
        be.set_lr(lr)
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        be.lr_optimizer.step()
        be.lr_optimizer.zero_grad()
        moved = torch.cat([(p.detach() - b).abs().flatten() for p, b in zip(model.parameters(), before)])
        assert moved.max().item() == pytest.approx(lr, rel=1e-4, abs=1e-12)
