"""Shared by test_deepspeed.py and deepspeed_worker.py: the tiny model, the synthetic steps, the
backend settings and a weights checksum, so the test process and every rank use the same ones."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch

from atgrpo.learner.batching import MicroBatch, build_microbatches
from atgrpo.learner.logprobs import token_logprobs
from atgrpo.learner.loss import LossConfig
from atgrpo.messages import GroupKey, Sample
from atgrpo.models.folder import load_model
from atgrpo.models.tiny import TinyModelSpec, build_tiny_model

SPEC = TinyModelSpec(hidden_size=32, num_layers=1, intermediate_size=64, num_heads=2, num_kv_heads=1)
LOSS = LossConfig(clip_eps_low=0.2, clip_eps_high=0.2)
LR = 1e-3
WEIGHT_DECAY = 0.01
EXTRA_CONFIG = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}
"""Partition every tensor under ZeRO-3 (by default tensors this small stay whole on every rank)."""

SHARES = [
    [[0, 2], [1, 3]],  # step 1: each rank half of the micro-batches
    [[0, 1, 2], []],  # step 2: rank 1 has nothing (dummy passes keep ZeRO-2/3 collectives matched)
    [[0], [1, 2, 3]],  # step 3 (after the checkpoint): uneven the other way
]
"""Per step, per rank of a 2-rank job: indices of the step's micro-batches the rank trains on."""

STREAM_CHUNKS = [
    [[[0], [], [2]], [[], [1, 3], []]],  # step 1: three arrivals, a rank often has nothing in one
    [[[1], [0, 2]], [[], []]],  # step 2: rank 1 has nothing at all
]
"""Per step, per rank: the rank's micro-batches in the order a streaming learner gets them, one
`accumulate` call per chunk; every rank makes the same number of calls."""


def build_model(folder: Path) -> Path:
    return build_tiny_model(SPEC, folder)


def plain_batch(ids: torch.Tensor) -> MicroBatch:
    """Only `input_ids` and `attention_mask` matter (for `token_logprobs`)."""
    ones = torch.ones_like(ids)
    return MicroBatch(ids, ones, ones.bool(), ones.float(), ones.float(), ones.float())


def make_steps(model_dir: Path, seed: int = 0) -> list[list[MicroBatch]]:
    """Three steps of micro-batches (4, 3, 4 of them) of samples near the model's own policy.

    Behaviour log-probs are the model's own plus noise, so ratios straddle the clip range (some
    tokens clipped, some not) instead of all being clipped.
    """
    model = load_model(model_dir).eval()
    rng = np.random.default_rng(seed)
    steps = []
    for n_mb in (4, 3, 4):
        mbs = []
        for _ in range(n_mb):  # two samples per micro-batch, of different lengths (padding inside)
            samples = []
            for i in range(2):
                prompt = rng.integers(3, 60, size=int(rng.integers(3, 7))).tolist()
                response = rng.integers(3, 60, size=int(rng.integers(2, 6))).tolist()
                ids = torch.tensor([prompt + response])
                with torch.no_grad():
                    logp, _ = token_logprobs(model, plain_batch(ids), LOSS.temperature)
                own = logp[0, len(prompt) - 1 :]
                noisy = (own + torch.from_numpy(rng.normal(0.0, 0.15, size=len(response))).float()).clamp(max=0.0)
                samples.append(
                    Sample(
                        run_id="test",
                        policy="shared",
                        version=0,
                        step=len(steps),
                        role="plan",
                        key=GroupKey(env=i, agent=0, turn=0),
                        prompt_ids=prompt,
                        response_ids=response,
                        logprobs=noisy.tolist(),
                        reward=0.0,
                        reward_team=0.0,
                        reward_local=0.0,
                    )
                )
            # step 2's advantages are larger, so its gradient norm is well above step 1's (choose_grad_clip)
            advantages = (rng.normal(size=len(samples)) * (4.0 if len(steps) == 1 else 1.0)).astype(np.float32)
            (mb,) = build_microbatches(samples, advantages, max_tokens=64, pad_id=0)
            mbs.append(mb)
        steps.append(mbs)
    return steps


def choose_grad_clip(model_dir: Path, steps: list[list[MicroBatch]]) -> float:
    """A clip norm between the unclipped gradient norms of steps 1 and 2: step 1 is then not clipped,
    so step 2's norm is the unclipped one and is clipped. One clipped step and one unclipped make a
    gradient that is off by a constant factor change the weights, not only the reported norm (Adam
    alone is scale-invariant)."""
    from atgrpo.learner.backends import TorchBackend

    probe = TorchBackend(load_model(model_dir), lr=LR, weight_decay=WEIGHT_DECAY, grad_clip=float("inf"), loss_cfg=LOSS)
    n1, n2 = (probe.train_step(mbs, total_tokens(mbs))["grad_norm"] for mbs in steps[:2])
    assert n2 > 1.2 * n1, (n1, n2)
    return (n1 + n2) / 2


def total_tokens(mbs: list[MicroBatch]) -> int:
    return sum(mb.num_tokens for mb in mbs)


def to_dicts(mbs: list[MicroBatch]) -> list[dict[str, torch.Tensor]]:
    """The micro-batches' wire form (named tensors), which `torch.load(weights_only=True)` reads back."""
    return [mb.tensors() for mb in mbs]


def from_dicts(ds: list[dict[str, torch.Tensor]]) -> list[MicroBatch]:
    return [MicroBatch.from_tensors(d) for d in ds]


def checksum(weights: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        h.update(name.encode())
        h.update(weights[name].contiguous().numpy().tobytes())
    return h.hexdigest()
