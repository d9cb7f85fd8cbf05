"""The learner backend contract: one policy's model and optimizer, trained one AT-GRPO step at a time.

A backend owns its model and optimizer; nothing else touches them. `train_step` runs forward and
backward over the micro-batches it is given (gradient accumulation), clips the gradient norm and
takes exactly one optimizer step. In a multi-rank job each rank passes its own share of micro-batches
and the same `total_tokens` (the step's loss normalizer over all ranks); gradients are summed across
ranks by the backend (each rank's loss is already a share of the global mean), so every rank ends the
step with identical weights.

Metrics returned by `train_step` are the step's, flat: `loss`, `clip_frac`, `logprob_mismatch`,
`is_weight` (each a `LossOutputs` sum over `total_tokens`), `grad_norm` (before clipping) and
`tokens` (`total_tokens`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path

import torch

from atgrpo.learner.logprobs import loss_inputs
from atgrpo.learner.loss import LossConfig, ppo_clip_loss
from atgrpo.learner.microbatch import MicroBatch


class LearnerBackend(abc.ABC):
    model: torch.nn.Module

    @abc.abstractmethod
    def train_step(self, micro_batches: list[MicroBatch], total_tokens: int) -> dict[str, float]:
        """One optimizer step; returns the step's metrics (see the module docstring)."""

    @abc.abstractmethod
    def export_weights(self) -> dict[str, torch.Tensor]:
        """Full weights as contiguous CPU tensors by HF parameter name (gathered under ZeRO-3)."""

    @abc.abstractmethod
    def save_checkpoint(self, folder: Path) -> None:
        """Model and optimizer state, enough for an exact resume. Every rank calls it."""

    @abc.abstractmethod
    def load_checkpoint(self, folder: Path) -> None: ...


def accumulate(
    model: torch.nn.Module,
    micro_batches: list[MicroBatch],
    total_tokens: int,
    loss_cfg: LossConfig,
    backward: Callable[[torch.Tensor], None],
    ref_model: torch.nn.Module | None = None,
) -> dict[str, float]:
    """Forward, loss and `backward(loss)` for every micro-batch; returns the summed metric numerators."""
    sums: dict[str, float] = {}
    for mb in micro_batches:
        out = ppo_clip_loss(loss_inputs(model, mb, loss_cfg, ref_model), loss_cfg, total_tokens)
        backward(out.loss)
        for k, v in out.sums().items():
            sums[k] = sums.get(k, 0.0) + v
    return sums


def finish_metrics(sums: dict[str, float], total_tokens: int, grad_norm: float) -> dict[str, float]:
    """Metric sums divided by `total_tokens`, named without `_sum`, plus `grad_norm` and `tokens`."""
    n = max(total_tokens, 1)
    out = {k.removesuffix("_sum"): v / n for k, v in sums.items()}
    out["grad_norm"] = grad_norm
    out["tokens"] = float(total_tokens)
    return out


__all__ = ["LearnerBackend", "accumulate", "finish_metrics"]
