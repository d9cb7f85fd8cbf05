"""Learner backends: one policy's model and optimizer, trained one AT-GRPO step at a time.

A backend owns its model and optimizer; nothing else touches them. `train_step` runs forward/backward
over the micro-batches it is given (gradient accumulation), clips the gradient norm and takes exactly
one optimizer step. In a multi-rank job each rank passes its own share of micro-batches and the same
`total_tokens` (the step's loss normalizer over all ranks); gradients are summed across ranks by the
backend (each rank's loss is already a share of the global mean), so every rank ends the step with
identical weights.
"""

from __future__ import annotations

import abc
from pathlib import Path

import torch

from atgrpo.learner.batching import MicroBatch
from atgrpo.learner.loss import LossConfig, policy_loss


class LearnerBackend(abc.ABC):
    model: torch.nn.Module

    @abc.abstractmethod
    def train_step(self, micro_batches: list[MicroBatch], total_tokens: int) -> dict[str, float]:
        """One optimizer step; returns metrics (`loss`, `grad_norm`, `clip_frac`, `logprob_mismatch`, ...)."""

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
    backward,
    ref_model: torch.nn.Module | None = None,
) -> dict[str, float]:
    """Forward/backward every micro-batch (calling `backward(loss)`); returns summed metric numerators."""
    sums: dict[str, float] = {}
    for mb in micro_batches:
        loss, stats = policy_loss(model, mb, loss_cfg, total_tokens, ref_model)
        backward(loss)
        for k, v in stats.items():
            sums[k] = sums.get(k, 0.0) + v
    return sums


def finish_metrics(sums: dict[str, float], total_tokens: int, grad_norm: float) -> dict[str, float]:
    n = max(total_tokens, 1)
    out = {k.removesuffix("_sum"): v / n for k, v in sums.items()}
    out["grad_norm"] = grad_norm
    out["tokens"] = float(total_tokens)
    return out


class TorchBackend(LearnerBackend):
    """Plain torch: AdamW, one process (or DDP-free multi-rank via `torch.distributed` all-reduce)."""

    def __init__(self, model: torch.nn.Module, *, lr: float, weight_decay: float, grad_clip: float, loss_cfg: LossConfig):
        self.model = model
        self.model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.grad_clip = grad_clip
        self.loss_cfg = loss_cfg
        self.ref_model = None
        if loss_cfg.kl_coef:
            import copy

            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)

    def train_step(self, micro_batches: list[MicroBatch], total_tokens: int) -> dict[str, float]:
        self.optimizer.zero_grad(set_to_none=True)
        sums = accumulate(self.model, micro_batches, total_tokens, self.loss_cfg, lambda l: l.backward(), self.ref_model)
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            for p in self.model.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                torch.distributed.all_reduce(p.grad)  # loss is already divided by the global token count
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip))
        self.optimizer.step()
        return finish_metrics(sums, total_tokens, grad_norm)

    def export_weights(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().to("cpu", copy=True).contiguous() for k, v in self.model.state_dict().items()}

    def save_checkpoint(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, folder / "learner.pt")

    def load_checkpoint(self, folder: Path) -> None:
        state = torch.load(folder / "learner.pt", map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
