"""A streamed step is the batch step: `TorchBackend` fed in chunks (unnormalised sums, scaled once
at `finish_step`) against the textbook step, whose loss is divided by the step's token total before
backward, with clipping and AdamW applied by hand. Weights are compared after Adam steps with the
tolerance test_deepspeed.py explains (rounding of a different summation order, AVX2 or AVX-512)."""

from __future__ import annotations

import torch
from deepspeed_cases import (
    LOSS,
    LR,
    STREAM_CHUNKS,
    WEIGHT_DECAY,
    build_model,
    choose_grad_clip,
    make_steps,
    total_tokens,
)

from atgrpo.learner.backends import TorchBackend
from atgrpo.learner.logprobs import loss_inputs
from atgrpo.learner.loss import ppo_clip_loss
from atgrpo.models.folder import load_model

ATOL, RTOL = 1e-2 * LR, 1e-5


def textbook_step(model, optimizer, mbs, grad_clip: float) -> float:
    optimizer.zero_grad(set_to_none=True)
    total = total_tokens(mbs)
    for mb in mbs:
        ppo_clip_loss(loss_inputs(model, mb, LOSS, None), LOSS, total).loss.backward()
    norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))
    optimizer.step()
    return norm


def test_streamed_torch_step_equals_loss_normalised_up_front(tmp_path):
    model_dir = build_model(tmp_path / "tiny")
    steps = make_steps(model_dir)
    grad_clip = choose_grad_clip(model_dir, steps)
    model = load_model(model_dir).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    streamed = TorchBackend(load_model(model_dir), lr=LR, weight_decay=WEIGHT_DECAY, grad_clip=grad_clip, loss_cfg=LOSS)
    norms = []
    for i, chunks in enumerate(STREAM_CHUNKS):
        want = textbook_step(model, optimizer, steps[i], grad_clip)
        for chunk in chunks[0] + chunks[1]:
            streamed.accumulate([steps[i][j] for j in chunk])
        got = streamed.finish_step(total_tokens(steps[i]))
        assert abs(got["grad_norm"] - want) <= 1e-5 * want
        norms.append(want)
    assert norms[0] < grad_clip < norms[1]  # one step clipped, one not: a wrong scale would show
    for name, p in model.state_dict().items():
        torch.testing.assert_close(streamed.model.state_dict()[name], p, atol=ATOL, rtol=RTOL, msg=name)
