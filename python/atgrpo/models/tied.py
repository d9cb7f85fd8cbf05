"""Tied weights: one tensor under two state-dict names (Qwen3-1.7B's and the built-in model's
`lm_head.weight` is `model.embed_tokens.weight`).

A published set of weights holds each tensor once, under its first name in module order
(`model.embed_tokens.weight`): a second copy would cost every actor its bytes each version (0.6 GB at
Qwen3-1.7B in bf16) for nothing. Receivers fill the other names from it, in their own process:
the torch engine ties them, the vLLM engine passes the tensor under both names to its in-place
reload (on vLLM's CPU build, the head under the embedding's name alone stayed stale).
"""

from __future__ import annotations

import torch


def tied_aliases(model: torch.nn.Module) -> dict[str, str]:
    """Every parameter name that is a second name of a tensor an earlier name holds -> that name."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        kept = first.setdefault(id(param), name)
        if kept != name:
            aliases[name] = kept
    return aliases


def without_aliases(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` (`model`'s state dict, or tensors by its names) with each tied tensor once."""
    aliases = tied_aliases(model)
    return {k: v for k, v in state.items() if k not in aliases}


__all__ = ["tied_aliases", "without_aliases"]
