"""peft models of atgrpo's LoRA policies: several adapters on one base, and one policy's view of it.

Used by the learner (`learner.lora`, which trains the adapters) and the torch rollout engine
(`engines.lora`, which switches them per request batch), so both name and address adapters alike.

A group of LoRA policies on one base is one `peft.PeftModel` holding one adapter per policy
(peft's multi-adapter model: adapters live side by side in each targeted layer, and `set_adapter`
picks the one the forward uses). This is the one safe way to share a base with peft:
`get_peft_model` injects layers into the module it is given, so two PeftModels made on one base
module would nest their adapters.

Invariants: the base's parameters never require a gradient; `AdapterWeights` of a policy covers its
adapter's tensors and nothing else; the adapter name inside peft is `adapter_name(policy)`
("p_<policy>"): peft warns of names contained in its "lora_" prefix, which short policy names like
"a" would be.
"""

from __future__ import annotations

from pathlib import Path

import torch

from atgrpo.config import RunConfig
from atgrpo.models.adapters import peft_config


def adapter_name(policy: str) -> str:
    return f"p_{policy}"


def attach_adapters(base: torch.nn.Module, cfg: RunConfig, group: list[str], base_dir: str | Path | None = None):
    """`base` wrapped in a PeftModel with one adapter per policy of `group` (peft's initialisation:
    A random from the current torch seed, B zero, so every adapter starts as the base). The base is
    frozen by peft; the first policy's adapter is active."""
    from peft import get_peft_model

    first, *rest = group
    model = get_peft_model(base, peft_config(cfg.policies[first].lora, base_dir), adapter_name=adapter_name(first))  # type: ignore[arg-type]
    for p in rest:
        model.add_adapter(adapter_name(p), peft_config(cfg.policies[p].lora, base_dir))  # type: ignore[arg-type]
    model.set_adapter(adapter_name(first))
    return model


class AdapterWeights:
    """One policy's adapter on a shared PeftModel: what its backend trains, exports and saves."""

    def __init__(self, model, policy: str) -> None:
        self.model = model
        self.policy = policy
        self.name = adapter_name(policy)
        marker = (f".lora_A.{self.name}.", f".lora_B.{self.name}.")
        self.named = [(n, p) for n, p in model.named_parameters() if any(m in n for m in marker)]
        if not self.named:
            raise ValueError(f"policy {policy}: the model has no adapter {self.name}")
        self.warm_started = False
        """True once loaded from a warm-started adapter (`learner.lora.load_shared_bases`)."""

    def activate(self) -> None:
        """Make this adapter the one the forward applies (and the only one requiring gradients)."""
        if list(self.model.active_adapters) != [self.name]:
            self.model.set_adapter(self.name)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for _, p in self.named]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The adapter's tensors under peft's names (`models.adapters`), the live parameters' data."""
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(self.model, adapter_name=self.name)

    def load_state_dict(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy `tensors` (peft names) into the adapter in place; every tensor must be there, shapes equal."""
        own = self.state_dict()
        missing = sorted(set(own) - set(tensors))
        extra = sorted(set(tensors) - set(own))
        if missing or extra:
            raise ValueError(f"adapter of {self.policy}: missing {missing[:3]}, unexpected {extra[:3]}")
        live = dict(self.named)
        with torch.no_grad():
            for key, src in tensors.items():
                dst = live[_live_name(key, self.name)]
                if dst.shape != src.shape:
                    raise ValueError(
                        f"adapter of {self.policy}: {key} has shape {tuple(src.shape)}, wants {tuple(dst.shape)}"
                    )
                dst.copy_(src)


def base_state(model) -> dict[str, torch.Tensor]:
    """The frozen base's tensors under its own HF names (peft's `.base_layer` taken out, adapters left out)."""
    out = {}
    for key, t in model.get_base_model().state_dict().items():
        if ".lora_" in key:
            continue
        out[key.replace(".base_layer.", ".")] = t
    return out


def _live_name(key: str, name: str) -> str:
    """A peft state-dict name -> the live parameter's name (the adapter name put back)."""
    for part in (".lora_A.", ".lora_B."):
        if part in key:
            return key.replace(part, f"{part}{name}.")
    raise ValueError(f"{key} is not a LoRA tensor name")


__all__ = ["AdapterWeights", "adapter_name", "attach_adapters", "base_state"]
