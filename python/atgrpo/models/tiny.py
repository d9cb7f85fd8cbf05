"""The default policy: a small Qwen3-architecture causal LM created from a spec, no download.

`build_tiny_model(spec, folder)` writes an HF-format folder (config, safetensors weights, tokenizer)
that every other part of atgrpo loads like a real checkpoint; nothing special-cases it afterwards.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from atgrpo.config import TinyModelSpec  # defined with the run config, which must not import torch
from atgrpo.models.tokenizer import build_tokenizer


def build_tiny_model(spec: TinyModelSpec, folder: str | Path) -> Path:
    folder = Path(folder)
    tokenizer = build_tokenizer(spec.tokenizer)
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


__all__ = ["TinyModelSpec", "build_tiny_model"]
