"""Learner backends (torch, DeepSpeed) behind one contract, `LearnerBackend`, and `make_backend`,
which picks one from a run's `[train]` section.

`deepspeed_backend` is imported only when the DeepSpeed backend is chosen, so a torch-only install
never imports deepspeed.
"""

from __future__ import annotations

import torch

from atgrpo.config import TrainSection
from atgrpo.learner.backends.base import LearnerBackend
from atgrpo.learner.backends.torch_backend import TorchBackend
from atgrpo.learner.checkpointing import configure_learner_model
from atgrpo.learner.lora import AdapterWeights
from atgrpo.learner.loss import LossConfig


def make_backend(
    model: torch.nn.Module,
    cfg: TrainSection,
    policy_lr: float,
    weight_decay: float,
    loss_cfg: LossConfig,
    adapter: AdapterWeights | None = None,
) -> LearnerBackend:
    """A backend owning `model` (loaded in fp32 on its device: the master weights) and a fresh
    AdamW, computing in `cfg.dtype` (mixed precision under "bfloat16", `base`).

    With `cfg.backend == "deepspeed"` this is a collective: every rank of the job must call it.
    `adapter`: a LoRA policy, `model` being its group's shared PeftModel (`learner.lora`); under
    DeepSpeed ZeRO 0-2 only (ZeRO-3 is a ValueError, `config.lora.LORA_ZERO3`)."""
    configure_learner_model(model, cfg)  # gradient checkpointing, logit chunks (`train`)
    if cfg.backend == "torch":
        return TorchBackend(
            model,
            lr=policy_lr,
            weight_decay=weight_decay,
            grad_clip=cfg.grad_clip,
            loss_cfg=loss_cfg,
            dtype=cfg.dtype,
            adapter=adapter,
        )
    if cfg.backend == "deepspeed":
        from atgrpo.learner.backends.deepspeed_backend import DeepSpeedBackend

        return DeepSpeedBackend(
            model,
            lr=policy_lr,
            weight_decay=weight_decay,
            grad_clip=cfg.grad_clip,
            loss_cfg=loss_cfg,
            zero_stage=cfg.zero_stage,
            shared_prefix=cfg.share_prefix,
            dtype=cfg.dtype,
            adapter=adapter,
        )
    raise ValueError(f"unknown learner backend {cfg.backend!r}")


__all__ = ["LearnerBackend", "TorchBackend", "make_backend"]
