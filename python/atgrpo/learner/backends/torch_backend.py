"""Plain-torch learner backend: AdamW in one process, or replicated across ranks with gradients
summed by `torch.distributed` all-reduce (no DDP wrapper).

Owns its model, optimizer and, when `kl_coef` is set, the KL reference (`base.kl_reference`: a
frozen copy of the initial model, or a LoRA policy's base with the adapters off). Under
`torch.distributed` every rank must call `train_step` (an all-reduce per parameter), even with no
micro-batches: its zero gradients still take part and AdamW still steps.

Precision (the contract's, `base`): the model's parameters are the fp32 master weights and AdamW's
state is fp32. With `dtype="bfloat16"` the forward runs under `torch.autocast` in bf16, so the
gradients land in the fp32 parameters' fp32 `.grad` and accumulate there across micro-batches;
scaling, the all-reduce, clipping and the update all see fp32. The KL reference is kept in the
compute dtype (it is only ever run forward, under the same autocast). The tests run the bf16 path
on the CPU under CPU autocast; on CUDA it ran on an H200 and an H100 (docs/gpus.md), not in CI.

LoRA (`adapter`, `learner.lora`): `model` is a PeftModel shared with the other policies of its base;
this backend activates its adapter before each forward and its optimizer, clipping, all-reduce,
exports and checkpoints cover the adapter's tensors only (the frozen base is in none of them).
"""

from __future__ import annotations

from pathlib import Path

import torch

from atgrpo.devices import model_device
from atgrpo.learner.backends.base import (
    LearnerBackend,
    accumulate,
    as_fp32_master,
    compute_dtype,
    finish_metrics,
    kl_reference,
    score_micro_batches,
)
from atgrpo.learner.distributed import local_rank
from atgrpo.learner.lora import AdapterWeights, check_checkpoint_adapter
from atgrpo.learner.loss import LossConfig
from atgrpo.learner.microbatch import MicroBatch


class TorchBackend(LearnerBackend):
    def __init__(
        self,
        model: torch.nn.Module,
        *,
        lr: float,
        weight_decay: float,
        grad_clip: float,
        loss_cfg: LossConfig,
        dtype: str = "float32",
        adapter: AdapterWeights | None = None,
    ):
        """`dtype`: the compute dtype (`train.dtype`); the weights `model` holds become the fp32 master.
        `adapter`: train only this LoRA adapter of `model` (a PeftModel; `learner.lora`)."""
        self.compute_dtype = compute_dtype(dtype)
        self.model = as_fp32_master(model)
        self.model.train()
        self.device = model_device(self.model)
        self.adapter = adapter
        self.params = adapter.parameters() if adapter is not None else list(self.model.parameters())
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay)
        self.lr_optimizer = self.optimizer
        self.grad_clip = grad_clip
        self.loss_cfg = loss_cfg
        self.ref_model = kl_reference(self.model, adapter, self.compute_dtype) if loss_cfg.kl_coef else None
        self._sums: dict[str, float] = {}

    def accumulate(self, micro_batches: list[MicroBatch], proximal: list[torch.Tensor] | None = None) -> None:
        if self.adapter is not None:
            self.adapter.activate()
        accumulate(
            self.model,
            micro_batches,
            self.loss_cfg,
            lambda loss: loss.backward(),
            self._sums,
            self.ref_model,
            device=self.device,
            autocast_dtype=self.compute_dtype,
            proximal=proximal,
        )

    def score(self, micro_batches: list[MicroBatch]) -> list[torch.Tensor]:
        if self.adapter is not None:
            self.adapter.activate()
        temperature = self.loss_cfg.temperature
        return score_micro_batches(
            self.model, micro_batches, temperature, device=self.device, autocast_dtype=self.compute_dtype
        )

    def finish_step(self, total_tokens: int) -> dict[str, float]:
        scale = 1.0 / max(total_tokens, 1)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        for p in self.params:
            if p.grad is None and distributed:
                p.grad = torch.zeros_like(p)  # every rank all-reduces every parameter, used or not
            if p.grad is not None:
                p.grad.mul_(scale)
                if distributed:
                    torch.distributed.all_reduce(p.grad)  # a sum: each rank's gradient is a share of the global mean
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.grad_clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return finish_metrics(self._take_sums(), total_tokens, grad_norm)

    def export_weights(self, to_host: bool = True) -> dict[str, torch.Tensor]:
        # The master rounded to the compute dtype: what the autocast matmuls multiply with.
        return self.host_copy(self.published_state(), self.compute_dtype) if to_host else {}

    def save_checkpoint(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        # Ranks hold replicas (replica_mismatch watches them), so one writer per host: several
        # ranks writing one file at once could leave it torn. Every host keeps its own copy, as
        # each rank loads from its own disk; the caller's barrier orders the write before any read.
        if local_rank() != 0:
            return
        # An adapter's tensor names carry no policy (models.adapters): its name is saved beside them.
        torch.save(
            {"model": self.weight_state(), "optimizer": self.optimizer.state_dict(), "adapter": self.adapter_policy},
            folder / "learner.pt",
        )

    def load_checkpoint(self, folder: Path) -> None:
        state = torch.load(folder / "learner.pt", map_location="cpu", weights_only=True)
        check_checkpoint_adapter(folder / "learner.pt", state.get("adapter"), self.adapter_policy)
        if self.adapter is not None:
            self.adapter.load_state_dict(state["model"])
        else:
            self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])


__all__ = ["TorchBackend"]
