"""Gradient checkpointing of a causal LM's decoder layers that keeps the KV cache, and the one call
that applies a run's learner memory settings to a model (`configure_learner_model`).

Why not transformers' own: `GradientCheckpointingLayer.__call__` (transformers 5.19,
`modeling_layers.py`) sets `past_key_values=None` and `use_cache=False` when checkpointing in
training mode, so a shared-prefix micro-batch's response rows would be scored without their prompt.

Here each decoder layer's `forward` is replaced on the instance by `_checkpointed_forward`, which
runs the class's own `forward` under `torch.utils.checkpoint` (non-reentrant) whenever autograd is
recording. The layer gets the run's cache through `_CacheOnce`: the first run of the layer passes
its `update` to the real cache (written exactly once, as without checkpointing) and keeps what the
cache returned; the replay in backward gets those same tensors back and writes nothing. So the
replay computes exactly what the forward computed, and gradients reach the prompt pass through the
cached keys and values as they do without checkpointing. Tested against no checkpointing in both
layouts (`tests/learner/test_gradient_checkpointing.py`).

Invariants: transformers' own flag must stay off (both at once would checkpoint twice and drop the
cache); parameter names and the state dict are unchanged (only an instance attribute is added, and
`copy.deepcopy` rebinds it to the copy). Under `torch.no_grad` layers run as usual. GPU and
DeepSpeed ZeRO-3 runs of this path are untested here (no GPU); the mechanism is torch's own
non-reentrant checkpoint, which ZeRO-3's per-module parameter hooks serve in the replay as in the
forward, since the replay calls the same submodules.
"""

from __future__ import annotations

import functools
import types
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from atgrpo.errors import UnsupportedModelError

CHUNK_ATTRIBUTE = "atgrpo_logit_chunk_tokens"
"""Attribute of a learner model holding its `train.logit_chunk_tokens` (read by `learner.logprobs`)."""
DEFAULT_LOGIT_CHUNK_TOKENS = 1024
"""Chunk size of a model nobody configured (warm start, log-prob checks): `TrainSection`'s default."""


def configure_learner_model(model: torch.nn.Module, train: Any) -> torch.nn.Module:
    """Apply a run's `[train]` memory settings (`gradient_checkpointing`, `logit_chunk_tokens`) to
    the learner's `model` before a backend takes it; returns `model`. Called where backends are made."""
    setattr(model, CHUNK_ATTRIBUTE, int(train.logit_chunk_tokens))
    if train.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model


def logit_chunk_tokens(model: torch.nn.Module) -> int:
    """The chunk size `configure_learner_model` gave `model` (or a DeepSpeed engine's module)."""
    inner = getattr(model, "module", model)
    return int(getattr(inner, CHUNK_ATTRIBUTE, DEFAULT_LOGIT_CHUNK_TOKENS))


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    """The decoder layers of an HF causal LM (`get_decoder().layers`: Llama, Qwen2/3, Mistral, ...)."""
    get_decoder = getattr(model, "get_decoder", None)
    layers = getattr(get_decoder(), "layers", None) if callable(get_decoder) else None
    if not isinstance(layers, torch.nn.ModuleList) or len(layers) == 0:
        raise UnsupportedModelError(
            f"{type(model).__name__} has no decoder layers at get_decoder().layers; "
            "train.gradient_checkpointing needs them"
        )
    return layers


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Checkpoint every decoder layer of `model`, keeping the KV cache (see the module docstring).
    Idempotent; refuses a model on which transformers' own checkpointing is on."""
    for layer in decoder_layers(model):
        if getattr(layer, "gradient_checkpointing", False):
            raise UnsupportedModelError(
                "transformers' gradient checkpointing is on (it drops the KV cache shared prefixes need); "
                "call model.gradient_checkpointing_disable() and use train.gradient_checkpointing"
            )
        layer.forward = types.MethodType(_checkpointed_forward, layer)


def is_checkpointed(model: torch.nn.Module) -> bool:
    return all(getattr(layer.forward, "__func__", None) is _checkpointed_forward for layer in decoder_layers(model))


def _checkpointed_forward(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    forward = functools.partial(type(self).forward, self)
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    if kwargs.get("past_key_values") is not None:
        kwargs["past_key_values"] = _CacheOnce(kwargs["past_key_values"])
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


class _CacheOnce:
    """The run's cache as one checkpointed layer call sees it: `update` reaches the real cache on
    the first run only; the replay gets the first run's result. Anything else is read through."""

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._results: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        if layer_idx not in self._results:
            self._results[layer_idx] = self._cache.update(key_states, value_states, layer_idx, *args, **kwargs)
        return self._results[layer_idx]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)


__all__ = [
    "CHUNK_ATTRIBUTE",
    "DEFAULT_LOGIT_CHUNK_TOKENS",
    "configure_learner_model",
    "decoder_layers",
    "enable_gradient_checkpointing",
    "is_checkpointed",
    "logit_chunk_tokens",
]
