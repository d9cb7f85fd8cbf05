"""AT-GRPO kernels: group ids, group-normalised advantages, reward mixing, token packing.

Shapes below: n samples, G groups, B selected samples, L the longest selected sample, T their total
tokens. Inputs are any array-likes (lists, numpy arrays of any integer/float dtype); they are converted
once to the int64 / float64 the Rust kernels use, and not copied when they already are C-contiguous
arrays of that dtype. Do not mutate them from another thread during a call: the kernels run without
the GIL. Every returned array is new and owned by the caller.

Bad input raises a typed error from `atgrpo.errors`, never a panic: `KernelShapeError` (lengths that
disagree, a non-1-D array), `KernelArgumentError` (a value out of its domain), `SampleTooLongError`.

Advantage rules (python/atgrpo/ALGORITHM.md, step 4), for group g over its *finite* rewards:
`A = (r - mean_g) / (std_g + eps)`, in float64 (`A = r - mean_g` with `scale_by_std=False`, Dr. GRPO), where
- non-finite rewards (NaN, +-inf) are left out of mean/std, get A = 0 and are counted;
- a singleton group (one finite reward) gets A = 0: there is no baseline to compare with;
- a constant group (max == min) gets exactly A = 0, not rounding noise divided by eps;
- std uses `ddof=1` by default (unbiased, as `torch.std` in verl/TRL GRPO), `ddof=0` on request.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from atgrpo import _core
from atgrpo.errors import KernelArgumentError, KernelShapeError

__all__ = [
    "GroupStats",
    "GroupedAdvantages",
    "PackedBatch",
    "PaddedBatch",
    "compute_advantages",
    "group_advantages",
    "group_ids",
    "mix_rewards",
    "pack_batch",
    "pad_batch",
    "plan_microbatches",
]

Int64Array = npt.NDArray[np.int64]
Float64Array = npt.NDArray[np.float64]


class GroupStats(NamedTuple):
    """Per-group statistics over finite rewards, and counts of the degenerate cases (for metrics)."""

    mean: Float64Array
    """[G] mean of the group's finite rewards; NaN for an empty group."""
    std: Float64Array
    """[G] std with the chosen ddof; 0 for singleton and constant groups, NaN for empty ones."""
    size: Int64Array
    """[G] number of finite rewards in the group."""
    num_singleton: int
    """Groups with exactly one finite reward."""
    num_constant: int
    """Groups with two or more finite rewards, all equal."""
    num_empty: int
    """Ids in 0..G with no finite reward (all non-finite, or unused)."""
    num_nonfinite: int
    """Samples whose reward was NaN or +-inf."""


class GroupedAdvantages(NamedTuple):
    """Result of `compute_advantages`."""

    group_ids: Int64Array
    """[n] dense group id of each sample, 0..G-1 in order of first appearance."""
    num_groups: int
    """G."""
    advantages: Float64Array
    """[n] per-sample advantage."""
    stats: GroupStats


class PaddedBatch(NamedTuple):
    """Right-padded micro-batch; every field is [B, L]."""

    input_ids: Int64Array
    attention_mask: npt.NDArray[np.bool_]
    """True on real tokens, False on padding."""
    loss_mask: npt.NDArray[np.bool_]
    """True on response tokens (position >= prompt length); not shifted."""
    token_advantages: npt.NDArray[np.float32]
    """The sample's advantage on response tokens, 0 elsewhere."""


class PackedBatch(NamedTuple):
    """Micro-batch concatenated without padding (flash-attn varlen layout); per-token fields are [T]."""

    input_ids: Int64Array
    position_ids: Int64Array
    """Position inside its own sample: restarts at 0 for each sample."""
    cu_seqlens: Int64Array
    """[B + 1] sample b is `cu_seqlens[b]:cu_seqlens[b + 1]` (flash-attn wants `.to(torch.int32)`)."""
    loss_mask: npt.NDArray[np.bool_]
    """True on response tokens (position >= prompt length); not shifted."""
    token_advantages: npt.NDArray[np.float32]
    """The sample's advantage on response tokens, 0 elsewhere."""


def group_ids(env: npt.ArrayLike, agent: npt.ArrayLike, turn: npt.ArrayLike) -> tuple[Int64Array, int]:
    """Dense AT-GRPO group ids from the key (env, agent, turn), each [n] with keys >= 0.

    Returns `(ids [n], G)`: two samples share an id exactly when their keys are equal; ids run 0..G-1
    in order of first appearance. `env` is the environment's own index (never divided by K), so the
    samples of different envs never share a group. Trajectory-level grouping: agent = turn = 0.
    A negative key is an error (`KernelArgumentError`): keys are indices, and -1 is usually a leaked
    "no env" sentinel that would otherwise form a fake group.
    """
    return _core.group_ids(_ints("env", env), _ints("agent", agent), _ints("turn", turn))


def group_advantages(
    group_ids: npt.ArrayLike,
    rewards: npt.ArrayLike,
    num_groups: int,
    *,
    eps: float = 1e-6,
    ddof: int = 1,
    scale_by_std: bool = True,
) -> tuple[Float64Array, GroupStats]:
    """Advantages `[n]` for samples with known group ids `[n]` in 0..num_groups and rewards `[n]`.

    Rules in the module docstring. Errors: an id outside 0..num_groups, eps not finite and > 0, or
    ddof not 0/1 -> `KernelArgumentError`; lengths that differ -> `KernelShapeError`.
    """
    adv, stats = _core.group_advantages(
        _ints("group_ids", group_ids),
        _floats("rewards", rewards),
        int(num_groups),
        float(eps),
        int(ddof),
        bool(scale_by_std),
    )
    return adv, GroupStats(*stats)


def compute_advantages(
    env: npt.ArrayLike,
    agent: npt.ArrayLike,
    turn: npt.ArrayLike,
    rewards: npt.ArrayLike,
    *,
    eps: float = 1e-6,
    ddof: int = 1,
    scale_by_std: bool = True,
) -> GroupedAdvantages:
    """`group_ids` then `group_advantages` in one call (one trip into Rust); all inputs [n]."""
    ids, num_groups, adv, stats = _core.compute_advantages(
        _ints("env", env),
        _ints("agent", agent),
        _ints("turn", turn),
        _floats("rewards", rewards),
        float(eps),
        int(ddof),
        bool(scale_by_std),
    )
    return GroupedAdvantages(ids, num_groups, adv, GroupStats(*stats))


def mix_rewards(team: npt.ArrayLike, local: npt.ArrayLike, alpha: float = 1.0) -> Float64Array:
    """`alpha * team + local`, each [n] (python/atgrpo/ALGORITHM.md, step 3; the paper uses alpha = 1).

    alpha must be finite (`KernelArgumentError`); non-finite rewards pass through, and the advantage
    kernel then counts and neutralises them.
    """
    return _core.mix_rewards(_floats("team", team), _floats("local", local), float(alpha))


def plan_microbatches(lengths: npt.ArrayLike, max_tokens: int) -> list[Int64Array]:
    """Split samples of `lengths` [n] (e.g. `np.diff(offsets)`) into micro-batches of <= max_tokens.

    First-fit decreasing, deterministic: longest samples first (ties: lower index first), each into
    the first micro-batch with room. Returns one sorted int64 index array per micro-batch, in order of
    creation; every sample appears exactly once. A sample longer than `max_tokens` raises
    `SampleTooLongError`; `max_tokens <= 0` or a negative length raises `KernelArgumentError`.
    """
    return _core.plan_microbatches(_ints("lengths", lengths), int(max_tokens))


def pad_batch(
    tokens: npt.ArrayLike,
    offsets: npt.ArrayLike,
    prompt_lens: npt.ArrayLike,
    advantages: npt.ArrayLike,
    indices: npt.ArrayLike | None = None,
    *,
    pad_id: int,
) -> PaddedBatch:
    """Samples `indices` (default: all, in order) right-padded with `pad_id` to the longest of them.

    Samples are flat: sample i is `tokens[offsets[i]:offsets[i+1]]` (tokens [sum of lengths],
    offsets [n + 1]), its first `prompt_lens[i]` tokens ([n]) are the prompt, `advantages` [n] its
    per-sample advantage. Offsets must start at 0, increase strictly (no empty sample) and end at
    len(tokens); 0 <= prompt_lens[i] <= length; advantages finite; indices in 0..n (repeats allowed).
    Violations raise `KernelArgumentError` / `KernelShapeError`. Returns [B, L] arrays.
    """
    args = _samples(tokens, offsets, prompt_lens, advantages, indices)
    return PaddedBatch(*_core.pad_batch(*args, int(pad_id)))


def pack_batch(
    tokens: npt.ArrayLike,
    offsets: npt.ArrayLike,
    prompt_lens: npt.ArrayLike,
    advantages: npt.ArrayLike,
    indices: npt.ArrayLike | None = None,
) -> PackedBatch:
    """Samples `indices` (default: all, in order) concatenated without padding; inputs as `pad_batch`."""
    return PackedBatch(*_core.pack_batch(*_samples(tokens, offsets, prompt_lens, advantages, indices)))


def _samples(
    tokens: npt.ArrayLike,
    offsets: npt.ArrayLike,
    prompt_lens: npt.ArrayLike,
    advantages: npt.ArrayLike,
    indices: npt.ArrayLike | None,
) -> tuple[Int64Array, Int64Array, Int64Array, Float64Array, Int64Array]:
    offs = _ints("offsets", offsets)
    idx = np.arange(max(len(offs) - 1, 0), dtype=np.int64) if indices is None else _ints("indices", indices)
    return _ints("tokens", tokens), offs, _ints("prompt_lens", prompt_lens), _floats("advantages", advantages), idx


def _vector(name: str, x: npt.ArrayLike, kinds: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise KernelShapeError(f"{name} must be 1-D, got shape {a.shape}")
    # An empty list comes in as float64; it is a valid empty vector of any dtype.
    if a.size and a.dtype.kind not in kinds:
        raise KernelArgumentError(f"{name} must hold {'integers' if kinds == 'iub' else 'numbers'}, got {a.dtype}")
    return a


def _ints(name: str, x: npt.ArrayLike) -> Int64Array:
    # Floats are refused rather than truncated: a fractional env id or token id is a bug upstream.
    return np.ascontiguousarray(_vector(name, x, "iub"), dtype=np.int64)


def _floats(name: str, x: npt.ArrayLike) -> Float64Array:
    return np.ascontiguousarray(_vector(name, x, "iubf"), dtype=np.float64)
