"""The module a LoRA policy's DeepSpeed engine owns: its adapter's parameters, and nothing else.

The LoRA policies of one base share one PeftModel (`learner.lora`), but each policy has its own
DeepSpeed engine, and an engine treats its module as its own: it moves it to its device,
broadcasts its parameters from rank 0, flattens them into ZeRO partitions (rebinding each
parameter's `.data` to a view of a flat buffer), casts it under DeepSpeed's bf16, and saves and
loads its state dict. Given the PeftModel, every engine would do all that to the shared base and to
the other policies' adapters. So each engine gets an `AdapterModule` instead.

Invariants:
- Its only registered parameters are its policy's adapter Parameters, the very objects that sit in
  the peft layers (so whatever DeepSpeed does to them, the PeftModel's forward sees). It has no
  buffers and no registered submodule.
- The shared PeftModel is held outside `nn.Module`'s registries (a plain instance attribute set
  with `object.__setattr__`), so `parameters()`, `state_dict()`, `to()` and DeepSpeed's walks over
  `named_modules()` never reach the base or another adapter.
- Its forward activates the policy's adapter, then runs the PeftModel with the caller's arguments
  (a KV cache included): the adapter that computes is always this engine's.
- What atgrpo reads through `engine.module` (`output_head.plain_head`: `get_output_embeddings`,
  `config`; `checkpointing.logit_chunk_tokens`: the chunk attribute) is the PeftModel's.

ZeRO-3 cannot use it: stage 3 gathers partitioned parameters through hooks on the submodules of
the module it is given, and the layers that use the adapters live in the shared base, outside it
(`config.lora.check_lora` refuses the combination).
"""

from __future__ import annotations

from typing import Any

import torch

from atgrpo.learner.checkpointing import CHUNK_ATTRIBUTE, logit_chunk_tokens
from atgrpo.learner.lora import AdapterWeights


class AdapterModule(torch.nn.Module):
    weights: AdapterWeights
    shared: Any
    """The group's PeftModel."""

    def __init__(self, adapter: AdapterWeights) -> None:
        super().__init__()
        # Registered: the engine's parameters (the same objects as in the peft layers).
        self.adapter = torch.nn.ParameterList(adapter.parameters())
        # Not registered: the shared model and the policy's view of it.
        object.__setattr__(self, "weights", adapter)
        object.__setattr__(self, "shared", adapter.model)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.weights.activate()
        return self.shared(*args, **kwargs)

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.shared.get_output_embeddings()

    @property
    def config(self) -> Any:
        return self.shared.config


# The chunk size `configure_learner_model` gave the shared model, under the attribute name
# `logit_chunk_tokens` reads (one name, defined in `checkpointing`).
setattr(AdapterModule, CHUNK_ATTRIBUTE, property(lambda self: logit_chunk_tokens(self.shared)))

__all__ = ["AdapterModule"]
