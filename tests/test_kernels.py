"""`atgrpo.kernels` against float64 numpy / pure-Python references written here, plus every bad input."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atgrpo import _core, kernels
from atgrpo.bench import kernels as kernels_bench
from atgrpo.errors import AtgrpoError, KernelArgumentError, KernelShapeError, SampleTooLongError

# ---- references ----


def ref_group_ids(env, agent, turn):
    seen: dict[tuple[int, int, int], int] = {}
    ids = [seen.setdefault((e, a, t), len(seen)) for e, a, t in zip(env, agent, turn)]
    return np.array(ids, dtype=np.int64), len(seen)


def ref_advantages(ids, rewards, num_groups, eps=1e-6, ddof=1, scale_by_std=True):
    ids, rewards = np.asarray(ids), np.asarray(rewards, dtype=np.float64)
    adv = np.zeros(len(rewards))
    mean, std, size = np.full(num_groups, np.nan), np.full(num_groups, np.nan), np.zeros(num_groups, np.int64)
    constant = np.zeros(num_groups, bool)
    for g in range(num_groups):
        members = (ids == g) & np.isfinite(rewards)
        r = rewards[members]
        size[g] = len(r)
        if len(r) == 0:
            continue
        if r.max() == r.min():
            mean[g], std[g], constant[g] = r[0], 0.0, len(r) >= 2
            continue
        mean[g], std[g] = r.mean(), r.std(ddof=ddof)
        adv[members] = (r - mean[g]) / (std[g] + eps) if scale_by_std else r - mean[g]
    return adv, mean, std, size, constant


def ref_ffd(lengths, max_tokens):
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        b = next((b for b in range(len(bins)) if room[b] >= lengths[i]), None)
        if b is None:
            bins.append([])
            room.append(max_tokens)
            b = len(bins) - 1
        bins[b].append(i)
        room[b] -= lengths[i]
    return [sorted(b) for b in bins]


# ---- strategies ----

rewards_st = st.one_of(
    st.floats(-10, 10),
    st.sampled_from([0.0, 1.0, 0.1]),  # repeated values make constant groups
    st.sampled_from([np.nan, np.inf, -np.inf]),
)


@st.composite
def keyed_batches(draw, max_n=120):
    n = draw(st.integers(0, max_n))
    small = st.integers(0, 3)
    env = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    agent = draw(st.lists(small, min_size=n, max_size=n))
    turn = draw(st.lists(small, min_size=n, max_size=n))
    rewards = draw(st.lists(rewards_st, min_size=n, max_size=n))
    return env, agent, turn, rewards


@st.composite
def sample_batches(draw):
    lengths = draw(st.lists(st.integers(1, 12), min_size=1, max_size=20))
    prompts = [draw(st.integers(0, n)) for n in lengths]
    adv = draw(st.lists(st.floats(-5, 5), min_size=len(lengths), max_size=len(lengths)))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = np.arange(1, offsets[-1] + 1, dtype=np.int64) * 7
    indices = draw(st.lists(st.integers(0, len(lengths) - 1), max_size=10))
    return tokens, offsets, np.array(prompts), np.array(adv), np.array(indices, dtype=np.int64)


# ---- group ids ----


# Scales pick the kernel's three paths: dense keys (direct table), sparse (hashed u64), too wide for u64.
@given(keyed_batches(), st.sampled_from([1, 1_000_003, 2**59]))
def test_group_ids_match_first_appearance_reference(batch, scale: int) -> None:
    env, agent, turn, _ = batch
    env = [e * scale for e in env]
    ids, g = kernels.group_ids(env, agent, turn)
    want, want_g = ref_group_ids(env, agent, turn)
    np.testing.assert_array_equal(ids, want)
    assert g == want_g and ids.dtype == np.int64


def test_k_samples_of_different_envs_never_share_a_group() -> None:
    # python/atgrpo/ALGORITHM.md, rule "Per-environment groups": 8 envs x K=4 at the same (agent, turn)
    # are 8 groups of 4, keyed by env.
    env = np.repeat(np.arange(8), 4)
    ids, g = kernels.group_ids(env, np.zeros(32, np.int64), np.zeros(32, np.int64))
    assert g == 8
    np.testing.assert_array_equal(ids, env)


def test_group_ids_accept_large_keys_and_any_integer_dtype() -> None:
    big = np.iinfo(np.int64).max
    ids, g = kernels.group_ids([big, big, 0], np.array([5, 5, 5], np.uint8), [True, True, False])
    assert ids.tolist() == [0, 0, 1] and g == 2


@pytest.mark.parametrize("column", [0, 1, 2])
def test_group_ids_reject_negative_keys(column: int) -> None:
    cols = [[0, 1], [0, 0], [0, 0]]
    cols[column][1] = -1
    with pytest.raises(KernelArgumentError, match=">= 0"):
        kernels.group_ids(*cols)


def test_group_ids_reject_bad_shapes_and_dtypes() -> None:
    with pytest.raises(KernelShapeError, match="agent"):
        kernels.group_ids([0, 1], [0], [0, 0])
    with pytest.raises(KernelShapeError, match="1-D"):
        kernels.group_ids([[0, 1]], [[0, 0]], [[0, 0]])
    with pytest.raises(KernelArgumentError, match="integers"):
        kernels.group_ids([0.5], [0], [0])


# ---- advantages ----


@settings(max_examples=200)
@given(keyed_batches(), st.sampled_from([0, 1]), st.sampled_from([1e-6, 1e-2]))
def test_advantages_match_numpy_reference(batch, ddof: int, eps: float) -> None:
    env, agent, turn, rewards = batch
    ids, g = ref_group_ids(env, agent, turn)
    adv, stats = kernels.group_advantages(ids, rewards, g, eps=eps, ddof=ddof)
    want, mean, std, size, constant = ref_advantages(ids, rewards, g, eps, ddof)
    np.testing.assert_allclose(adv, want, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.std, std, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(stats.size, size)
    assert stats.num_nonfinite == int((~np.isfinite(np.asarray(rewards, dtype=float))).sum())
    assert stats.num_singleton == int((size == 1).sum()) and stats.num_empty == int((size == 0).sum())
    # Constant means max == min; subnormal rewards can also give std == 0 (underflow) without it.
    assert stats.num_constant == int(constant.sum())


@settings(max_examples=100)
@given(keyed_batches())
def test_advantages_without_std_scaling_are_centred_rewards(batch) -> None:
    # Dr. GRPO: r - mean, the same groups and degenerate-group rules as with the std division.
    env, agent, turn, rewards = batch
    ids, g = ref_group_ids(env, agent, turn)
    adv, stats = kernels.group_advantages(ids, rewards, g, scale_by_std=False)
    want, *_ = ref_advantages(ids, rewards, g, scale_by_std=False)
    np.testing.assert_allclose(adv, want, rtol=1e-12, atol=1e-12)
    _, scaled = kernels.group_advantages(ids, rewards, g)
    for got, expected in zip(stats, scaled):
        np.testing.assert_array_equal(got, expected)
    out = kernels.compute_advantages(env, agent, turn, rewards, scale_by_std=False)
    np.testing.assert_array_equal(out.advantages, adv)


@given(keyed_batches())
def test_compute_advantages_is_group_ids_then_group_advantages(batch) -> None:
    env, agent, turn, rewards = batch
    out = kernels.compute_advantages(env, agent, turn, rewards)
    ids, g = kernels.group_ids(env, agent, turn)
    adv, stats = kernels.group_advantages(ids, rewards, g)
    np.testing.assert_array_equal(out.group_ids, ids)
    assert out.num_groups == g
    np.testing.assert_array_equal(out.advantages, adv)
    for got, want in zip(out.stats, stats):
        np.testing.assert_array_equal(got, want)


def test_default_std_is_unbiased() -> None:
    adv, stats = kernels.group_advantages([0, 0], [0.0, 2.0], 1)
    assert stats.std[0] == pytest.approx(np.sqrt(2.0))
    assert adv[1] == pytest.approx(1 / (np.sqrt(2.0) + 1e-6))
    _, population = kernels.group_advantages([0, 0], [0.0, 2.0], 1, ddof=0)
    assert population.std[0] == 1.0


def test_singleton_group_gets_zero_advantage() -> None:
    adv, stats = kernels.group_advantages([0, 1, 1], [7.0, 1.0, 2.0], 2)
    assert adv[0] == 0.0 and stats.num_singleton == 1
    assert stats.mean[0] == 7.0 and stats.std[0] == 0.0


def test_constant_group_gets_exactly_zero() -> None:
    # 0.1 * 3 / 3 != 0.1 in floating point; a sum-based mean would leave noise that eps blows up.
    adv, stats = kernels.group_advantages([0, 0, 0], [0.1, 0.1, 0.1], 1, eps=1e-12)
    assert adv.tolist() == [0.0, 0.0, 0.0]
    assert stats.num_constant == 1 and stats.mean[0] == 0.1 and stats.std[0] == 0.0


def test_non_finite_rewards_are_excluded_zeroed_and_counted() -> None:
    rewards = [1.0, np.nan, 3.0, np.inf, -np.inf]
    adv, stats = kernels.group_advantages([0, 0, 0, 1, 1], rewards, 2)
    clean, _ = kernels.group_advantages([0, 0], [1.0, 3.0], 1)
    assert adv[[0, 2]].tolist() == clean.tolist()
    assert adv[[1, 3, 4]].tolist() == [0.0, 0.0, 0.0]
    assert stats.num_nonfinite == 3 and stats.size.tolist() == [2, 0] and stats.num_empty == 1
    assert np.isnan(stats.mean[1]) and np.isnan(stats.std[1])


def test_trajectory_level_grouping_is_agent_and_turn_zero() -> None:
    env = np.array([3, 3, 5, 5, 3, 5])
    rewards = np.array([1.0, 2.0, 0.0, 4.0, 6.0, 1.0])
    zeros = np.zeros(6, np.int64)
    out = kernels.compute_advantages(env, zeros, zeros, rewards)
    assert out.num_groups == 2
    want, *_ = ref_advantages(np.array([0, 0, 1, 1, 0, 1]), rewards, 2)
    np.testing.assert_allclose(out.advantages, want, rtol=1e-12)


@pytest.mark.parametrize("eps", [0.0, -1e-6, np.nan, np.inf])
def test_bad_eps_is_rejected(eps: float) -> None:
    with pytest.raises(KernelArgumentError, match="eps"):
        kernels.group_advantages([0, 0], [1.0, 2.0], 1, eps=eps)
    with pytest.raises(KernelArgumentError, match="eps"):
        kernels.compute_advantages([0], [0], [0], [1.0], eps=eps)


@pytest.mark.parametrize("ddof", [-1, 2])
def test_bad_ddof_is_rejected(ddof: int) -> None:
    with pytest.raises(KernelArgumentError, match="ddof"):
        kernels.group_advantages([0, 0], [1.0, 2.0], 1, ddof=ddof)


@pytest.mark.parametrize(("ids", "num_groups"), [([0, -1], 2), ([0, 2], 2), ([0, 0], -1)])
def test_group_ids_out_of_range_are_rejected(ids: list[int], num_groups: int) -> None:
    with pytest.raises(KernelArgumentError):
        kernels.group_advantages(ids, [1.0, 2.0], num_groups)


def test_advantage_length_mismatch_is_a_shape_error() -> None:
    with pytest.raises(KernelShapeError, match="rewards"):
        kernels.group_advantages([0, 0], [1.0], 1)
    with pytest.raises(KernelShapeError, match="rewards"):
        kernels.compute_advantages([0, 0], [0, 0], [0, 0], [1.0])


def test_results_are_fresh_writable_arrays() -> None:
    rewards = np.array([1.0, 2.0])
    adv, _ = kernels.group_advantages([0, 0], rewards, 1)
    adv[0] = 42.0
    assert rewards.tolist() == [1.0, 2.0] and adv.flags.writeable


def test_binding_accepts_strided_arrays() -> None:
    env = np.arange(8, dtype=np.int64)[::2]
    zeros = np.zeros(8, np.int64)[::2]
    ids, g = _core.group_ids(env, zeros, zeros)
    assert ids.tolist() == [0, 1, 2, 3] and g == 4


def test_kernels_release_the_gil() -> None:
    # With a long switch interval a thread that keeps the GIL lets no other Python thread run for the
    # whole call (unless a forced switch lands inside it: rare, and required of all three calls here),
    # so ticks that land during the call prove it ran detached.
    n = 2_000_000
    env, zeros, rewards = np.arange(n) // 4, np.zeros(n, np.int64), np.random.default_rng(0).random(n)
    ticks = [0]
    done = threading.Event()

    def tick() -> None:
        while not done.is_set():
            ticks[0] += 1

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.25)
    t = threading.Thread(target=tick)
    t.start()
    try:
        during = []
        for _ in range(3):
            before = ticks[0]
            kernels.compute_advantages(env, zeros, zeros, rewards)
            during.append(ticks[0] - before)
    finally:
        done.set()
        t.join()
        sys.setswitchinterval(old)
    assert min(during) > 0, during


# ---- reward mixing ----


@given(st.lists(st.tuples(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6))), st.floats(-10, 10))
def test_mix_rewards_is_alpha_team_plus_local(pairs, alpha: float) -> None:
    team = np.array([p[0] for p in pairs], dtype=np.float64)
    local = np.array([p[1] for p in pairs], dtype=np.float64)
    np.testing.assert_allclose(kernels.mix_rewards(team, local, alpha), alpha * team + local, rtol=1e-15)


def test_mix_rewards_default_alpha_is_one_and_nan_propagates() -> None:
    out = kernels.mix_rewards([1.0, np.nan], [0.5, 0.0])
    assert out[0] == 1.5 and np.isnan(out[1])


def test_mix_rewards_rejects_bad_alpha_and_lengths() -> None:
    with pytest.raises(KernelArgumentError, match="alpha"):
        kernels.mix_rewards([1.0], [1.0], np.nan)
    with pytest.raises(KernelShapeError):
        kernels.mix_rewards([1.0, 2.0], [1.0], 1.0)


# ---- micro-batch planning ----


@given(st.lists(st.integers(0, 50), max_size=80), st.integers(50, 200))
def test_plan_is_first_fit_decreasing(lengths: list[int], max_tokens: int) -> None:
    bins = kernels.plan_microbatches(lengths, max_tokens)
    assert [b.tolist() for b in bins] == ref_ffd(lengths, max_tokens)
    assert all(b.dtype == np.int64 and sum(lengths[i] for i in b) <= max_tokens for b in bins)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))


def test_plan_rejects_too_long_sample() -> None:
    with pytest.raises(SampleTooLongError, match="sample 1 has 11 tokens"):
        kernels.plan_microbatches([3, 11], 10)


@pytest.mark.parametrize(("lengths", "max_tokens"), [([1], 0), ([1], -5), ([-1, 2], 10)])
def test_plan_rejects_bad_budget_and_lengths(lengths: list[int], max_tokens: int) -> None:
    with pytest.raises(KernelArgumentError):
        kernels.plan_microbatches(lengths, max_tokens)


# ---- padding and packing ----


def ref_rows(tokens, offsets, prompts, adv, indices):
    for i in indices:
        seq = tokens[offsets[i] : offsets[i + 1]]
        response = np.arange(len(seq)) >= prompts[i]
        yield seq, response, np.where(response, np.float32(adv[i]), np.float32(0))


@given(sample_batches())
def test_pad_batch_matches_reference(batch) -> None:
    tokens, offsets, prompts, adv, indices = batch
    out = kernels.pad_batch(tokens, offsets, prompts, adv, indices, pad_id=-1)
    rows = list(ref_rows(tokens, offsets, prompts, adv, indices))
    width = max((len(r[0]) for r in rows), default=0)
    assert out.input_ids.shape == out.loss_mask.shape == (len(indices), width)
    assert out.token_advantages.dtype == np.float32 and out.attention_mask.dtype == np.bool_
    for b, (seq, response, tok_adv) in enumerate(rows):
        n = len(seq)
        np.testing.assert_array_equal(out.input_ids[b, :n], seq)
        assert (out.input_ids[b, n:] == -1).all() and not out.attention_mask[b, n:].any()
        assert out.attention_mask[b, :n].all()
        np.testing.assert_array_equal(out.loss_mask[b, :n], response)
        np.testing.assert_array_equal(out.token_advantages[b, :n], tok_adv)
        assert not out.loss_mask[b, n:].any() and (out.token_advantages[b, n:] == 0).all()


@given(sample_batches())
def test_pack_batch_matches_reference_and_pad_batch(batch) -> None:
    tokens, offsets, prompts, adv, indices = batch
    out = kernels.pack_batch(tokens, offsets, prompts, adv, indices)
    rows = list(ref_rows(tokens, offsets, prompts, adv, indices))
    cat = lambda parts, dtype: np.concatenate([np.zeros(0, dtype), *parts])  # noqa: E731
    np.testing.assert_array_equal(out.input_ids, cat([r[0] for r in rows], np.int64))
    np.testing.assert_array_equal(out.position_ids, cat([np.arange(len(r[0])) for r in rows], np.int64))
    np.testing.assert_array_equal(out.cu_seqlens, np.cumsum([0, *(len(r[0]) for r in rows)]))
    np.testing.assert_array_equal(out.loss_mask, cat([r[1] for r in rows], np.bool_))
    np.testing.assert_array_equal(out.token_advantages, cat([r[2] for r in rows], np.float32))
    padded = kernels.pad_batch(tokens, offsets, prompts, adv, indices, pad_id=0)
    np.testing.assert_array_equal(padded.token_advantages[padded.attention_mask], out.token_advantages)


def test_indices_default_to_every_sample() -> None:
    out = kernels.pack_batch([1, 2, 3], [0, 1, 3], [0, 1], [1.0, 2.0])
    assert out.cu_seqlens.tolist() == [0, 1, 3] and out.token_advantages.tolist() == [1.0, 0.0, 2.0]


GOOD: dict[str, Any] = dict(tokens=[1, 2, 3, 4, 5], offsets=[0, 2, 5], prompt_lens=[1, 2], advantages=[0.5, -0.5])


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("offsets", [0, 3, 2], KernelArgumentError),  # not monotone
        ("offsets", [0, 2, 4], KernelArgumentError),  # does not end at len(tokens)
        ("offsets", [1, 2, 5], KernelArgumentError),  # does not start at 0
        ("offsets", [0, 0, 5], KernelArgumentError),  # empty sample
        ("offsets", [], KernelArgumentError),  # not even [0]
        ("prompt_lens", [3, 2], KernelArgumentError),  # prompt longer than the sample
        ("prompt_lens", [-1, 2], KernelArgumentError),
        ("prompt_lens", [1], KernelShapeError),
        ("advantages", [0.5, np.nan], KernelArgumentError),
        ("advantages", [0.5, 0.1, 0.2], KernelShapeError),
        ("tokens", [1.5, 2, 3, 4, 5], KernelArgumentError),  # fractional token ids are refused
    ],
)
def test_malformed_samples_are_rejected(field: str, value: list[float], error: type[AtgrpoError]) -> None:
    args = {**GOOD, field: value}
    with pytest.raises(error):
        kernels.pad_batch(**args, indices=[0], pad_id=0)
    with pytest.raises(error):
        kernels.pack_batch(**args, indices=[0])


@pytest.mark.parametrize("indices", [[2], [-1], [0, 5]])
def test_out_of_range_indices_are_rejected(indices: list[int]) -> None:
    with pytest.raises(KernelArgumentError, match="indices"):
        kernels.pad_batch(**GOOD, indices=indices, pad_id=0)
    with pytest.raises(KernelArgumentError, match="indices"):
        kernels.pack_batch(**GOOD, indices=indices)


def test_empty_selection_gives_empty_batches() -> None:
    padded = kernels.pad_batch(**GOOD, indices=[], pad_id=0)
    assert padded.input_ids.shape == (0, 0)
    assert kernels.pack_batch(**GOOD, indices=[]).cu_seqlens.tolist() == [0]


# ---- benchmark ----


def test_bench_measures_every_row_against_a_reference() -> None:
    rows = kernels_bench.run(quick=True)
    assert len(rows) == 3 * len(kernels_bench.SIZES)
    assert all(r.value > 0 and r.reference_value > 0 and not r.higher_is_better for r in rows)
    assert {r.target for r in rows if r.target} == {">= 50x dict loop", "< 1 ms", "< 0.3 ms"}


def test_bench_refuses_a_wrong_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = kernels_bench.make_batch(512)
    kernels_bench.check_agreement(batch)
    monkeypatch.setattr(kernels_bench, "rust_advantages", lambda *b: np.zeros(len(b[3])))
    with pytest.raises(AssertionError):
        kernels_bench.check_agreement(batch)
