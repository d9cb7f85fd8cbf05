"""LoRA policies in the learner: one frozen base per group of policies, one peft adapter per policy.

Each group (`config.lora.lora_bases`) is loaded once and wrapped with one adapter per policy
(`models.peft_models`); each policy's backend gets its `AdapterWeights`.

Invariants:
- The base's parameters never require a gradient and are in no optimizer.
- A policy's backend sees its adapter only: the optimizer, gradient clipping, the all-reduce,
  exports and checkpoints cover the adapter's tensors and nothing else.
- Before any forward a backend activates its adapter (`AdapterWeights.activate`); backends of one
  group run one after the other (the trainer's loop), never interleaved within a micro-batch.
- A policy's version 0 is its warm-started adapter where `warmstart.prepare` made one
  (`paths.warm_adapter_dir`), else peft's initialisation (B zero: the base itself).
- A policy's KL reference is its initial policy, as a full policy's is its initial model: the base
  itself (`BaseReference`, the shared PeftModel with every adapter off) for an adapter that starts
  at B = 0; a frozen copy of the warm-started adapter (`AdapterReference`, one more adapter on the
  shared model, never trained or published) for one that was warm-started. The base is never copied.
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
from atgrpo.models.adapters import ADAPTER_WEIGHTS, read_adapter
from atgrpo.models.folder import load_model
from atgrpo.models.peft_models import AdapterWeights, adapter_name, attach_adapters, base_state
from atgrpo.paths import warm_adapter_dir


def load_shared_bases(cfg: RunConfig, folders: dict[str, Path], device: str) -> dict[str, "AdapterWeights"]:
    """Policy -> its adapter on its group's shared PeftModel, every group loaded once (fp32, on
    `device`) from its first policy's folder (`folders`: policy -> initial folder). A policy with a
    warm-started adapter (`paths.warm_adapter_dir`) starts from it, A and B as saved."""
    out: dict[str, AdapterWeights] = {}
    for group in lora_bases(cfg):
        base = load_model(folders[group[0]], dtype="float32", device=device)
        model = attach_adapters(base, cfg, group, folders[group[0]])
        for p in group:
            out[p] = AdapterWeights(model, p)
            start = warm_adapter_dir(cfg, p)
            if (start / ADAPTER_WEIGHTS).is_file():
                _, tensors = read_adapter(start)
                out[p].load_state_dict(tensors)
                out[p].warm_started = True
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


class AdapterReference(torch.nn.Module):
    """The KL reference of a warm-started LoRA policy: a frozen copy of its starting adapter, added to
    the group's shared PeftModel as adapter `ref_<name>` (its tensors only: the base is shared), and
    run as `BaseReference` runs the base: eval mode, then the model left as found (the policy's own
    adapter active and requiring gradients again). Made before any training step, so the copy is
    the warm-started adapter."""

    model: Any

    def __init__(self, adapter: AdapterWeights) -> None:
        super().__init__()
        object.__setattr__(self, "model", adapter.model)
        self.policy_adapter = adapter.name
        self.name = f"ref_{adapter.name}"
        if self.name not in adapter.model.peft_config:
            with torch.random.fork_rng(devices=[]):  # peft draws A for the new adapter: keep the run's stream
                adapter.model.add_adapter(self.name, adapter.model.peft_config[adapter.name])
            live = dict(adapter.model.named_parameters())
            with torch.no_grad():
                for n, p in adapter.named:
                    live[n.replace(f".{adapter.name}.", f".{self.name}.")].copy_(p)
            adapter.activate()  # peft's add_adapter may change which adapter is active and trainable
        for n, p in adapter.model.named_parameters():
            if f".{self.name}." in n:
                p.requires_grad_(False)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        training = self.model.training
        self.model.eval()
        try:
            self.model.set_adapter(self.name)
            with torch.no_grad():
                return self.model(*args, **kwargs)
        finally:
            self.model.set_adapter(self.policy_adapter)  # the policy's adapter active and trainable again
            for n, p in self.model.named_parameters():
                if f".{self.name}." in n:
                    p.requires_grad_(False)
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
    "AdapterReference",
    "AdapterWeights",
    "BaseReference",
    "adapter_name",
    "attach_adapters",
    "base_state",
    "check_checkpoint_adapter",
    "load_shared_bases",
]
