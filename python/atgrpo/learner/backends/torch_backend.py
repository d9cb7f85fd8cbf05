"""Plain-torch learner backend: AdamW in one process, or replicated across ranks with gradients
summed by `torch.distributed` all-reduce (no DDP wrapper).

Owns its model, optimizer and, when `kl_coef` is set, a frozen copy of the initial model as the KL
reference. Under `torch.distributed` every rank must call `train_step` (an all-reduce per parameter),
even with no micro-batches: its zero gradients still take part and AdamW still steps.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from atgrpo.learner.backends.base import LearnerBackend, accumulate, finish_metrics
from atgrpo.learner.loss import LossConfig
from atgrpo.learner.microbatch import MicroBatch


class TorchBackend(LearnerBackend):
    def __init__(self, model: torch.nn.Module, *, lr: float, weight_decay: float, grad_clip: float, loss_cfg: LossConfig):
        self.model = model
        self.model.train()
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
        self.grad_clip = grad_clip
        self.loss_cfg = loss_cfg
        self.ref_model = copy.deepcopy(model).eval().requires_grad_(False) if loss_cfg.kl_coef else None
        self._sums: dict[str, float] = {}

    def accumulate(self, micro_batches: list[MicroBatch]) -> None:
        accumulate(self.model, micro_batches, self.loss_cfg, lambda l: l.backward(), self._sums, self.ref_model)

    def finish_step(self, total_tokens: int) -> dict[str, float]:
        scale = 1.0 / max(total_tokens, 1)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        for p in self.model.parameters():
            if p.grad is None and distributed:
                p.grad = torch.zeros_like(p)  # every rank all-reduces every parameter, used or not
            if p.grad is not None:
                p.grad.mul_(scale)
                if distributed:
                    torch.distributed.all_reduce(p.grad)  # a sum: each rank's gradient is a share of the global mean
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return finish_metrics(self._take_sums(), total_tokens, grad_norm)

    def export_weights(self) -> dict[str, torch.Tensor]:
        return self.host_copy(self.model.state_dict(), None)

    def save_checkpoint(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}, folder / "learner.pt")

    def load_checkpoint(self, folder: Path) -> None:
        state = torch.load(folder / "learner.pt", map_location="cpu", weights_only=True)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


__all__ = ["TorchBackend"]
