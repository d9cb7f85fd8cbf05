"""The default policy: a small Qwen3-architecture causal LM created from a spec, no download.

`build_tiny_model(spec, folder)` writes an HF-format folder (config, safetensors weights, tokenizer)
that every other part of atgrpo loads like a real checkpoint; nothing special-cases it afterwards.
"""

from __future__ import annotations

from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict
from transformers import Qwen3Config, Qwen3ForCausalLM

from atgrpo.models.tokenizer import build_char_tokenizer


class TinyModelSpec(BaseModel):
    """Size of the built-in model. The defaults (~0.8M parameters) train on a laptop CPU."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = 128
    """Width of the residual stream."""
    intermediate_size: int = 384
    """Width of the MLP."""
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    """Grouped-query attention, as in Qwen3."""
    max_positions: int = 512
    seed: int = 0
    """Initialisation seed: the same spec and seed give the same weights."""


def build_tiny_model(spec: TinyModelSpec, folder: str | Path) -> Path:
    folder = Path(folder)
    tokenizer = build_char_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(spec.seed)
    try:
        model = Qwen3ForCausalLM(config).float()
    finally:
        torch.random.set_rng_state(generator_state)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
