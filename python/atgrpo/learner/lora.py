"""LoRA policies in the learner: one frozen base per group of policies, one peft adapter per policy.

Each group (`config.lora.lora_bases`) is loaded once and wrapped with one adapter per policy
(`models.peft_models`); each policy's backend gets its `AdapterWeights`.

Invariants:
- The base's parameters never require a gradient and are in no optimizer.
- A policy's backend sees its adapter only: the optimizer, gradient clipping, the all-reduce,
  exports and checkpoints cover the adapter's tensors and nothing else.
- Before any forward a backend activates its adapter (`AdapterWeights.activate`); backends of one
  group run one after the other (the trainer's loop), never interleaved within a micro-batch.
"""

from __future__ import annotations

from pathlib import Path

from atgrpo.config import RunConfig
from atgrpo.config.lora import lora_bases
from atgrpo.models.folder import load_model
from atgrpo.models.peft_models import AdapterWeights, adapter_name, attach_adapters, base_state


def load_shared_bases(cfg: RunConfig, folders: dict[str, Path], device: str) -> dict[str, "AdapterWeights"]:
    """Policy -> its adapter on its group's shared PeftModel, every group loaded once (fp32, on
    `device`) from its first policy's folder (`folders`: policy -> initial folder)."""
    out: dict[str, AdapterWeights] = {}
    for group in lora_bases(cfg):
        base = load_model(folders[group[0]], dtype="float32", device=device)
        model = attach_adapters(base, cfg, group, folders[group[0]])
        for p in group:
            out[p] = AdapterWeights(model, p)
    return out


__all__ = ["AdapterWeights", "adapter_name", "attach_adapters", "base_state", "load_shared_bases"]
