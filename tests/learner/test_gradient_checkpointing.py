"""`train.gradient_checkpointing`: the same log-probs and gradients with and without it, in both
micro-batch layouts (the shared-prefix one keeps its prompts' KV cache), while the decoder layers
really are recomputed in backward.

Checkpointing replays the same operations on the same inputs, so on one CPU the results agree to
float rounding at most: the bound used is a few fp32 eps times the values' and gradients' sizes.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_deepspeed import world_of_one  # noqa: F401  (fixture)

from atgrpo.config import TrainSection
from atgrpo.errors import UnsupportedModelError
from atgrpo.learner.batching import build_microbatches
from atgrpo.learner.checkpointing import (
    configure_learner_model,
    enable_gradient_checkpointing,
    is_checkpointed,
    logit_chunk_tokens,
)
from atgrpo.learner.logprobs import loss_inputs, token_logprobs
from atgrpo.learner.loss import LossConfig, ppo_clip_loss
from atgrpo.messages import GroupKey, Sample
from atgrpo.models.folder import load_model
from atgrpo.models.tiny import TinyModelSpec, build_tiny_model

SPEC = TinyModelSpec(hidden_size=32, num_layers=3, intermediate_size=64, num_heads=2, num_kv_heads=1)
EPS = torch.finfo(torch.float32).eps
CFG = LossConfig(temperature=0.7, entropy_coef=0.01)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(SPEC, tmp_path_factory.mktemp("tiny"))


def micro_batches(share_prefix: bool):
    rng = np.random.default_rng(7)
    samples = []
    for g in range(5):
        prompt = rng.integers(3, 40, size=int(rng.integers(2, 16))).tolist()
        for _ in range(3):
            response = rng.integers(3, 40, size=int(rng.integers(1, 9))).tolist()
            samples.append(
                Sample(
                    "r",
                    "shared",
                    0,
                    0,
                    "plan",
                    GroupKey(g, 0, 0),
                    prompt,
                    response,
                    (rng.normal(size=len(response)) * 0.1 - 3.0).tolist(),
                    0.0,
                    0.0,
                    0.0,
                )
            )
    adv = rng.normal(size=len(samples))
    total = sum(len(s.response_ids) for s in samples)
    return build_microbatches(samples, adv, max_tokens=60, pad_id=0, share_prefix=share_prefix), total


def step(model, mbs, total) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every micro-batch's log-probs and the step's summed gradient (as a learner backend takes them)."""
    model.zero_grad(set_to_none=True)
    logps = []
    for mb in mbs:
        x = loss_inputs(model, mb, CFG)
        ppo_clip_loss(x, CFG, total).loss.backward()
        logps.append(x.logp.detach())
    return logps, torch.cat([p.grad.flatten() for p in model.parameters()])


def q_proj_calls(model) -> list[int]:
    calls = [0]
    model.get_decoder().layers[0].self_attn.q_proj.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("share_prefix", [False, True])
def test_same_logprobs_and_gradients_with_and_without_checkpointing(model_dir, share_prefix):
    mbs, total = micro_batches(share_prefix)
    assert len(mbs) > 1 and all((mb.prefix is not None) == share_prefix for mb in mbs)
    plain, ckpt = load_model(model_dir), load_model(model_dir)
    enable_gradient_checkpointing(ckpt)
    assert is_checkpointed(ckpt) and not is_checkpointed(plain)
    calls = q_proj_calls(ckpt)
    want_logp, want_grad = step(plain, mbs, total)
    got_logp, got_grad = step(ckpt, mbs, total)
    # layer 0 ran again in backward: twice per model call (the prefix pass too)
    assert calls[0] == 2 * len(mbs) * (2 if share_prefix else 1)
    for got, want in zip(got_logp, want_logp):
        torch.testing.assert_close(got, want, atol=4 * EPS * want.abs().max().item(), rtol=0)
    assert want_grad.abs().max() > 0
    torch.testing.assert_close(got_grad, want_grad, atol=4 * EPS * want_grad.abs().max().item(), rtol=0)


def test_transformers_own_checkpointing_would_score_responses_without_their_prompt(model_dir):
    """Why this module exists: with transformers' flag, the prefix pass's cache is dropped in
    training mode and shared-prefix log-probs change; ours are those of the plain layout."""
    (mb, *_), _ = micro_batches(True)
    model = load_model(model_dir).train()
    want, _ = token_logprobs(model, mb, 1.0)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    hf, _ = token_logprobs(model, mb, 1.0)
    mask = mb.loss_mask[:, 1:]
    assert (hf - want)[mask].abs().max() > 1e-3
    with pytest.raises(UnsupportedModelError, match="gradient_checkpointing_disable"):
        enable_gradient_checkpointing(model)


def test_no_grad_runs_layers_once_and_a_deep_copy_runs_its_own_weights(model_dir):
    """The KL reference is a deep copy of the checkpointed policy (DeepSpeed backend): it must run
    its own layers, not the original's."""
    (mb, *_), _ = micro_batches(True)
    model = load_model(model_dir)
    enable_gradient_checkpointing(model)
    ref = copy.deepcopy(model)
    calls = q_proj_calls(model)
    with torch.no_grad():
        before, _ = token_logprobs(ref, mb, 1.0)
        for p in ref.parameters():
            p.mul_(0.5)
        after, _ = token_logprobs(ref, mb, 1.0)
        token_logprobs(model, mb, 1.0)
    assert calls[0] == 2  # the original ran once per pass (prefix, rows), and only when called itself
    assert (after - before).abs().max() > 1e-3


def test_configure_reads_the_train_section(model_dir):
    model = load_model(model_dir)
    configure_learner_model(model, TrainSection(logit_chunk_tokens=7))
    assert logit_chunk_tokens(model) == 7 and not is_checkpointed(model)
    configure_learner_model(model, TrainSection(gradient_checkpointing=True, logit_chunk_tokens=0))
    assert logit_chunk_tokens(model) == 0 and is_checkpointed(model)
    with pytest.raises(UnsupportedModelError, match="decoder layers"):
        enable_gradient_checkpointing(torch.nn.Linear(2, 2))


def test_zero3_with_checkpointing_and_shared_prefixes_matches_the_torch_backend(world_of_one, tmp_path):
    """DeepSpeed ZeRO-3 (parameters partitioned, gathered again for each replay) with checkpointed
    layers and shared prefixes: the same update as the plain torch backend on plain batches."""
    from deepspeed_cases import EXTRA_CONFIG, LOSS, LR, WEIGHT_DECAY, build_model
    from test_deepspeed import assert_weights_close, snapshot

    from atgrpo.learner.backends import TorchBackend
    from atgrpo.learner.backends.deepspeed_backend import DeepSpeedBackend

    folder = build_model(tmp_path)
    policy = load_model(folder)
    enable_gradient_checkpointing(policy)
    ds = DeepSpeedBackend(
        policy,
        lr=LR,
        weight_decay=WEIGHT_DECAY,
        grad_clip=1.0,
        loss_cfg=LOSS,
        zero_stage=3,
        timeout_s=60,
        extra_config=EXTRA_CONFIG,
    )
    ref = TorchBackend(load_model(folder), lr=LR, weight_decay=WEIGHT_DECAY, grad_clip=1.0, loss_cfg=LOSS)
    plain, total = micro_batches(False)
    shared, _ = micro_batches(True)
    for _ in range(2):
        want = ref.train_step(plain, total)
        got = ds.train_step(shared, total)
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4, abs=1e-6)
        assert_weights_close(ds.export_weights(), snapshot(ref))
