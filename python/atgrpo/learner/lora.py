"""LoRA policies in the learner: one frozen base per group of policies, one peft adapter per policy.

Each group (`config.lora.lora_bases`) is loaded once and wrapped with one adapter per policy
(`models.peft_models`); each policy's backend gets its `AdapterWeights`.

Invariants:
- The base's parameters never require a gradient and are in no optimizer.
- A policy's backend sees its adapter only: the optimizer, gradient clipping, the all-reduce,
  exports and checkpoints cover the adapter's tensors and nothing else.
- Before any forward a backend activates its adapter (`AdapterWeights.activate`); backends of one
  group run one after the other (the trainer's loop), never interleaved within a micro-batch.
- A policy's KL reference is its initial policy, which is the base itself (peft starts B at zero):
  `BaseReference`, the shared PeftModel run with every adapter off. Nothing is copied.
- A checkpoint names the adapter it holds (None: a full model); `check_checkpoint_adapter` refuses
  another policy's adapter or a full model before anything is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from atgrpo.config import RunConfig
from atgrpo.config.lora import lora_bases
from atgrpo.errors import CheckpointLoadError
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


class BaseReference(torch.nn.Module):
    """The KL reference of a LoRA policy: the group's shared PeftModel with every adapter off
    (peft's `disable_adapter`) and in eval mode, as the frozen copy of a full policy is. Called as
    the model is (`learner.logprobs` runs it under no_grad, KV cache included); exposes what
    `output_head.plain_head` reads. Its forward leaves the model as it found it: the same active
    adapter, requiring gradients again (peft's `enable_adapter_layers` re-activates it), the same
    mode. The model is not registered (no parameters of its own: nothing to move, save or train)."""

    model: Any

    def __init__(self, model) -> None:
        super().__init__()
        object.__setattr__(self, "model", model)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        training = self.model.training
        self.model.eval()
        try:
            with self.model.disable_adapter():
                return self.model(*args, **kwargs)
        finally:
            self.model.train(training)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.model.get_output_embeddings()

    @property
    def config(self) -> Any:
        return self.model.config


def check_checkpoint_adapter(where: Path, found: str | None, want: str | None) -> None:
    """CheckpointLoadError unless the checkpoint at `where`, holding the adapter of policy `found`
    (None: a full model), is what a backend of `want` loads. Adapter tensors carry no policy
    (`models.adapters`), so this name is what keeps two same-shape adapters from being swapped."""
    if found == want:
        return
    held = f"the adapter of {found!r}" if found else "a full model"
    wanted = f"the adapter of {want!r}" if want else "a full model"
    raise CheckpointLoadError(f"{where} holds {held}, but this policy is {wanted}")


__all__ = [
    "AdapterWeights", "BaseReference", "adapter_name", "attach_adapters", "base_state", "check_checkpoint_adapter",
    "load_shared_bases",
]
