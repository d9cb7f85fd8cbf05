"""Load a model and its tokenizer from a local HF-format folder; never touches the network."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_model(folder: str | Path, dtype: str = "float32", device: str = "cpu") -> PreTrainedModel:
    if not Path(folder, "config.json").is_file():
        raise FileNotFoundError(f"no model at {folder}: expected an HF-format folder with config.json")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype], local_files_only=True)
    return model.to(device)


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerBase:
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok
