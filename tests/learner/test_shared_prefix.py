"""Shared-prefix micro-batches against the plain layout: same log-probs, loss, gradient and update."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from atgrpo.errors import SampleTooLongError
from atgrpo.learner.backends import TorchBackend
from atgrpo.learner.batching import MicroBatch, build_microbatches
from atgrpo.learner.logprobs import loss_inputs, token_logprobs
from atgrpo.learner.loss import LossConfig, ppo_clip_loss
from atgrpo.messages import GroupKey, Sample
from atgrpo.models.folder import load_model
from atgrpo.models.tiny import TinyModelSpec, build_tiny_model

SPEC = TinyModelSpec(hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(SPEC, tmp_path_factory.mktemp("tiny"))


def make_samples(seed: int, groups: int = 6, k: int = 4, prompt_len=(1, 20), response_len=(1, 9)) -> list[Sample]:
    """`groups` prompts of random lengths (length 1 included), `k` responses each, plus two loners."""
    rng = np.random.default_rng(seed)
    samples = []
    for g in range(groups + 2):
        prompt = rng.integers(3, 40, size=int(rng.integers(*prompt_len))).tolist()
        for _ in range(k if g < groups else 1):
            response = rng.integers(3, 40, size=int(rng.integers(*response_len))).tolist()
            behaviour = (rng.normal(size=len(response)) * 0.1 - 3.0).tolist()
            samples.append(
                Sample("r", "shared", 0, 0, "plan", GroupKey(g, 0, 0), prompt, response, behaviour, 0.0, 0.0, 0.0)
            )
    order = rng.permutation(len(samples))  # a group's samples need not be next to each other
    return [samples[i] for i in order]


def plain_batches(samples, adv, **kwargs) -> list[MicroBatch]:
    return build_microbatches(samples, adv, **kwargs)


def shared_batches(samples, adv, **kwargs) -> list[MicroBatch]:
    return build_microbatches(samples, adv, share_prefix=True, **kwargs)


def per_sample_logprobs(model, mbs: list[MicroBatch], samples: list[Sample]) -> dict[int, torch.Tensor]:
    out = {}
    for mb in mbs:
        logp, _ = token_logprobs(model, mb, 1.0)
        mask = mb.loss_mask[:, 1:]
        for row, i in enumerate(mb.sample_index):
            out[i] = logp[row][mask[row]]
            assert len(out[i]) == len(samples[i].response_ids)
    return out


def loss_and_grad(model, mbs, total, cfg=LossConfig()) -> tuple[float, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    value = 0.0
    for mb in mbs:
        loss = ppo_clip_loss(loss_inputs(model, mb, cfg), cfg, total).loss
        loss.backward()
        value += loss.item()
    return value, torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_logprobs_match_plain_layout(model_dir, seed):
    model = load_model(model_dir).eval()
    samples = make_samples(seed)
    adv = np.zeros(len(samples))
    with torch.no_grad():
        plain = per_sample_logprobs(model, plain_batches(samples, adv, max_tokens=10**6, pad_id=0), samples)
        shared = per_sample_logprobs(model, shared_batches(samples, adv, max_tokens=10**6, pad_id=0), samples)
    assert plain.keys() == shared.keys() == set(range(len(samples)))
    for i in plain:
        torch.testing.assert_close(shared[i], plain[i], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean"])
@pytest.mark.parametrize("max_tokens", [10**6, 40])
def test_loss_and_gradient_match_plain_layout(model_dir, aggregation, max_tokens):
    model = load_model(model_dir)
    samples = make_samples(3)
    adv = np.random.default_rng(3).normal(size=len(samples))
    total = len(samples) if aggregation == "seq_mean" else sum(len(s.response_ids) for s in samples)
    cfg = LossConfig(entropy_coef=0.01)
    plain = plain_batches(samples, adv, max_tokens=max_tokens, pad_id=0, aggregation=aggregation)
    shared = shared_batches(samples, adv, max_tokens=max_tokens, pad_id=0, aggregation=aggregation)
    want_loss, want_grad = loss_and_grad(model, plain, total, cfg)
    got_loss, got_grad = loss_and_grad(model, shared, total, cfg)
    assert got_loss == pytest.approx(want_loss, rel=1e-5, abs=1e-7)
    assert want_grad.abs().max() > 0
    torch.testing.assert_close(got_grad, want_grad, atol=1e-6, rtol=1e-4)


def test_torch_backend_update_matches_plain_layout(model_dir):
    samples = make_samples(4)
    adv = np.random.default_rng(4).normal(size=len(samples))
    total = sum(len(s.response_ids) for s in samples)
    weights = []
    for build in (plain_batches, shared_batches):
        backend = TorchBackend(load_model(model_dir), lr=1e-3, weight_decay=0.01, grad_clip=1.0, loss_cfg=LossConfig())
        for _ in range(2):
            metrics = backend.train_step(build(samples, adv, max_tokens=64, pad_id=0), total)
        assert metrics["tokens"] == total
        weights.append(backend.export_weights())
    for name in weights[0]:
        # 1% of one Adam step (lr 1e-3): Adam scales each entry by its own gradient RMS, so rounding
        # of the two layouts' different reduction orders is not damped where a gradient is near zero.
        torch.testing.assert_close(weights[1][name], weights[0][name], atol=1e-5, rtol=1e-5, msg=name)


def test_each_prompt_runs_once_and_the_budget_holds():
    samples = make_samples(5, groups=5, k=4, prompt_len=(10, 20))
    adv = np.zeros(len(samples))
    (mb,) = shared_batches(samples, adv, max_tokens=10**6, pad_id=0)
    distinct = {tuple(s.prompt_ids) for s in samples}
    assert mb.prefix is not None and mb.prefix.ids.shape[0] == len(distinct) == 7
    assert sorted(mb.sample_index) == list(range(len(samples)))
    for row, i in enumerate(mb.sample_index):  # each row continues its own prompt
        prompt = samples[i].prompt_ids
        n = len(prompt) - 1
        p = int(mb.prefix.row[row])
        assert mb.prefix.ids[p, mb.prefix.ids.shape[1] - n :].tolist() == prompt[:-1]
        assert int(mb.prefix.mask[p].sum()) == n
        assert mb.input_ids[row, 0] == prompt[-1]
        assert mb.input_ids[row, 1 : 1 + len(samples[i].response_ids)].tolist() == samples[i].response_ids

    budget = 45  # smaller than some groups: a group is cut, its prompt counted in every piece
    mbs = shared_batches(samples, adv, max_tokens=budget, pad_id=0)
    assert sorted(i for mb in mbs for i in mb.sample_index) == list(range(len(samples)))
    for mb in mbs:
        prompts = {tuple(samples[i].prompt_ids) for i in mb.sample_index}
        cost = sum(len(p) for p in prompts) + sum(len(samples[i].response_ids) for i in mb.sample_index)
        assert cost <= budget


def test_bad_samples_are_errors():
    samples = make_samples(6)
    adv = np.zeros(len(samples))
    with pytest.raises(SampleTooLongError):
        shared_batches(samples, adv, max_tokens=5, pad_id=0)
    empty = Sample("r", "shared", 0, 0, "plan", GroupKey(0, 0, 0), [5, 6], [], [], 0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="non-empty"):
        shared_batches([empty], np.zeros(1), max_tokens=100, pad_id=0)
    with pytest.raises(ValueError, match="finite advantage"):
        shared_batches(samples, np.full(len(samples), np.nan), max_tokens=100, pad_id=0)
    with pytest.raises(ValueError, match="finite advantage"):
        shared_batches(samples, adv[:-1], max_tokens=100, pad_id=0)
    with pytest.raises(ValueError, match="aggregation"):
        shared_batches(samples, adv, max_tokens=100, pad_id=0, aggregation="sum")
    assert shared_batches([], np.zeros(0), max_tokens=100, pad_id=0) == []


def test_one_token_prompts_still_run_a_prompt_pass(model_dir):
    """Every prompt a single token: the prompt pass runs on fully masked rows (ZeRO-3 needs the same
    number of forward calls on every rank) and changes nothing."""
    model = load_model(model_dir).eval()
    samples = make_samples(8, prompt_len=(1, 2))
    adv = np.zeros(len(samples))
    (mb,) = shared_batches(samples, adv, max_tokens=10**6, pad_id=0)
    assert mb.prefix is not None and mb.prefix.ids.shape[1] == 1 and int(mb.prefix.mask.sum()) == 0
    with torch.no_grad():
        plain = per_sample_logprobs(model, plain_batches(samples, adv, max_tokens=10**6, pad_id=0), samples)
        shared = per_sample_logprobs(model, [mb], samples)
    for i in plain:
        torch.testing.assert_close(shared[i], plain[i], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("share_prefix", [False, True])
def test_wire_form_round_trips_both_layouts(share_prefix):
    """`tensors()` is flat, named and contiguous (no pickle needed); `from_tensors` restores the
    micro-batch, layout included."""
    samples = make_samples(9)
    adv = np.random.default_rng(9).normal(size=len(samples))
    for mb in build_microbatches(samples, adv, max_tokens=60, pad_id=0, share_prefix=share_prefix):
        wire = mb.tensors()
        assert all(isinstance(v, torch.Tensor) and v.is_contiguous() for v in wire.values())
        assert wire["sample_index"].dtype == torch.int64 and wire["sample_index"].tolist() == list(mb.sample_index)
        assert ("prefix_ids" in wire) == share_prefix
        back = MicroBatch.from_tensors({k: v.clone() for k, v in wire.items()})
        assert back.sample_index == mb.sample_index and (back.prefix is None) == (mb.prefix is None)
        for k, v in back.tensors().items():
            assert torch.equal(v, wire[k]) and v.dtype == wire[k].dtype, k
    partial = {k: v for k, v in wire.items() if k != "row_prefix"} | {"prefix_ids": wire["input_ids"]}
    with pytest.raises(ValueError, match="shared prefix"):
        MicroBatch.from_tensors(partial)
    with pytest.raises(ValueError, match="unknown"):
        MicroBatch.from_tensors({**wire, "extra": wire["input_ids"]})


@pytest.mark.parametrize("share_prefix", [False, True])
def test_pairs_pack_like_samples(share_prefix):
    """Demonstration pairs go through the same packing as samples: same rows, tokens and masks."""
    from atgrpo.learner.batching import pair_microbatches

    samples = make_samples(10)
    pairs = [(s.prompt_ids, s.response_ids) for s in samples]
    want = build_microbatches(samples, np.ones(len(samples)), max_tokens=50, pad_id=0, share_prefix=share_prefix)
    got = pair_microbatches(pairs, max_tokens=50, pad_id=0, share_prefix=share_prefix)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        gw, ww = g.tensors(), w.tensors()
        assert gw.keys() == ww.keys()
        for k in gw:
            if k != "behaviour_logprobs":  # pairs have none: 0
                assert torch.equal(gw[k], ww[k]), k
        assert not g.behaviour_logprobs.any()
