"""Chunked log-probs and entropy against the straightforward full-logits computation, written out
here: the same values and the same parameter gradients in fp32, in both micro-batch layouts.

Tolerances come from fp32 rounding (eps = 1.19e-7) times the sizes involved: a logit is a dot
product over H hidden units, rounded differently when the output layer runs on a different number
of rows (BLAS blocking), so logits may differ by ~H * eps * (|h| . |w|); a log-prob or an entropy
then by a few times that plus eps times its own size. A parameter's gradient is a sum over at most
every scored token (n terms), so it may differ by ~n * eps * max|grad|. A wrong shift, a wrong row
or a missing chunk would differ by O(1).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from atgrpo.learner.batching import build_microbatches
from atgrpo.learner.logprobs import loss_inputs, token_logprobs
from atgrpo.learner.loss import LossConfig, ppo_clip_loss
from atgrpo.learner.microbatch import MicroBatch
from atgrpo.messages import GroupKey, Sample
from atgrpo.models.folder import load_model
from atgrpo.models.tiny import TinyModelSpec, build_tiny_model

SPEC = TinyModelSpec(hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1)
EPS = torch.finfo(torch.float32).eps
T = 0.7


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(SPEC, tmp_path_factory.mktemp("tiny"))


def samples_of(seed: int, groups: int = 4, k: int = 3) -> list[Sample]:
    rng = np.random.default_rng(seed)
    out = []
    for g in range(groups):
        prompt = rng.integers(3, 40, size=int(rng.integers(2, 15))).tolist()
        for _ in range(k):
            response = rng.integers(3, 40, size=int(rng.integers(1, 9))).tolist()
            out.append(
                Sample(
                    "r",
                    "shared",
                    0,
                    0,
                    "plan",
                    GroupKey(g, 0, 0),
                    prompt,
                    response,
                    [-3.0] * len(response),
                    0.0,
                    0.0,
                    0.0,
                )
            )
    return out


def batch(share_prefix: bool, seed: int = 0) -> MicroBatch:
    samples = samples_of(seed)
    adv = np.random.default_rng(seed).normal(size=len(samples))
    (mb,) = build_microbatches(samples, adv, max_tokens=10**6, pad_id=0, share_prefix=share_prefix)
    return mb


def full_logits(model, mb: MicroBatch) -> torch.Tensor:
    """[B, L, V] the model's logits at every position, the plain way (both layouts)."""
    from transformers import DynamicCache

    if mb.prefix is None:
        return model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False).logits
    p = mb.prefix
    cache = DynamicCache()
    model(
        input_ids=p.ids,
        attention_mask=p.mask,
        position_ids=(p.mask.cumsum(-1) - 1).clamp(min=0),
        past_key_values=cache,
        use_cache=True,
    )
    cache.batch_select_indices(p.row)
    positions = p.mask.sum(-1)[p.row][:, None] + torch.arange(mb.input_ids.shape[1])[None, :]
    mask = torch.cat([p.mask[p.row], mb.attention_mask], dim=1)
    return model(
        input_ids=mb.input_ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
    ).logits


def reference(model, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, L-1] log-probs, [B, L-1] entropy) from the whole [B, L-1, V] fp32 tempered logits."""
    logits = full_logits(model, mb)[:, :-1].float() / T
    logq = F.log_softmax(logits, dim=-1)
    return logq.gather(-1, mb.input_ids[:, 1:, None]).squeeze(-1), -(logq.exp() * logq).sum(-1)


def value_tol(model, scale: torch.Tensor) -> float:
    """Rounding bound of a log-prob or an entropy (see the module docstring). The final RMSNorm
    makes each hidden state's RMS 1 before its gain g, so sum_i |h_i w_i| <= sqrt(H) max|g| ||w_row||."""
    h = model.config.hidden_size
    gain = model.get_decoder().norm.weight.abs().max().item()
    row = model.get_output_embeddings().weight.norm(dim=1).max().item()
    return 8 * EPS * (h * h**0.5 * gain * row / T + scale.abs().max().item())


def grads_of(model, logp: torch.Tensor, ent: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Gradient of a fixed weighted sum of the scores at the loss-mask columns, every parameter."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(logp.shape, generator=gen), torch.randn(logp.shape, generator=gen)
    model.zero_grad(set_to_none=True)
    ((a * logp + b * ent) * mask).sum().backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("share_prefix", [False, True])
@pytest.mark.parametrize("chunk", [1, 5, 10**6])
def test_values_and_gradients_equal_the_full_logits(model_dir, share_prefix, chunk):
    model = load_model(model_dir)
    mb = batch(share_prefix)
    mask = mb.loss_mask[:, 1:]
    want_logp, want_ent = reference(model, mb)
    want_grad = grads_of(model, want_logp, want_ent, mask)
    assert want_grad.abs().max() > 0

    logp, ent = token_logprobs(model, mb, T, entropy=True, rows=mask, chunk_tokens=chunk)
    got_grad = grads_of(model, logp, ent, mask)
    tol = value_tol(model, torch.cat([want_logp, want_ent]))
    torch.testing.assert_close(logp[mask], want_logp[mask], atol=tol, rtol=0)
    torch.testing.assert_close(ent[mask], want_ent[mask], atol=tol, rtol=0)
    assert not logp[~mask].any() and not ent[~mask].any()  # only the asked-for columns are scored
    n = int(mask.sum())
    torch.testing.assert_close(got_grad, want_grad, atol=4 * n * EPS * want_grad.abs().max().item(), rtol=0)


@pytest.mark.parametrize("share_prefix", [False, True])
@pytest.mark.parametrize("chunk", [0, 3])
def test_every_column_without_rows_and_under_no_grad(model_dir, share_prefix, chunk):
    """No `rows`: every column scored (what `logprob_check` and the warm start read); chunk 0 is
    the unchunked reference itself."""
    model = load_model(model_dir).eval()
    mb = batch(share_prefix, seed=1)
    with torch.no_grad():
        want_logp, _ = reference(model, mb)
        logp, ent = token_logprobs(model, mb, T, chunk_tokens=chunk)
    assert ent is None and logp.shape == want_logp.shape
    tol = value_tol(model, want_logp)
    valid = mb.attention_mask[:, 1:].bool()  # padding columns too, but compare where tokens are real
    torch.testing.assert_close(logp[valid], want_logp[valid], atol=tol, rtol=0)


def test_no_vocabulary_wide_tensor_is_kept_for_backward(model_dir):
    """Chunked, the forward saves nothing [.., V] wide for backward (each chunk is recomputed);
    unchunked (chunk 0, the reference) it does: the check can fail."""
    model = load_model(model_dir)
    mb = batch(False, seed=2)
    vocab = model.config.vocab_size

    def widest(chunk: int) -> int:
        saved: list[torch.Size] = []

        def pack(t: torch.Tensor) -> torch.Tensor:
            saved.append(t.shape)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            token_logprobs(model, mb, T, entropy=True, rows=mb.loss_mask[:, 1:], chunk_tokens=chunk)
        return max((s.numel() for s in saved if len(s) and s[-1] == vocab), default=0)

    assert widest(4) == 0
    assert widest(0) >= mb.input_ids[:, 1:].numel() * vocab


def test_loss_inputs_scores_response_tokens_and_the_reference_without_grad(model_dir):
    model, ref = load_model(model_dir), load_model(model_dir).eval()
    mb = batch(True, seed=3)
    cfg = LossConfig(temperature=T, entropy_coef=0.01, kl_coef=0.1)
    x = loss_inputs(model, mb, cfg, ref)
    mask = mb.loss_mask[:, 1:]
    want_logp, want_ent = reference(model, mb)
    tol = value_tol(model, torch.cat([want_logp, want_ent]))
    torch.testing.assert_close(x.logp[mask], want_logp[mask], atol=tol, rtol=0)
    torch.testing.assert_close(x.entropy[mask], want_ent[mask], atol=tol, rtol=0)
    torch.testing.assert_close(x.ref_logp[mask], want_logp[mask], atol=tol, rtol=0)  # same weights
    assert x.logp.requires_grad and not x.ref_logp.requires_grad
    out = ppo_clip_loss(x, cfg, int(mask.sum()))
    assert torch.isfinite(out.loss)
