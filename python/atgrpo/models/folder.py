"""Load a model and its tokenizer from a local HF-format folder; never touches the network.

What a rollout needs to know about a model (its stop tokens, pad token and context length) is read
from the folder's own files by `model_facts`, so every engine and workflow uses the same values.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from atgrpo.errors.runtime import ModelFolderError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_model(folder: str | Path, dtype: str = "float32", device: str = "cpu") -> PreTrainedModel:
    if not Path(folder, "config.json").is_file():
        raise ModelFolderError(f"no model at {folder}: expected an HF-format folder with config.json")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dtype], local_files_only=True)
    return model.to(device)


def load_tokenizer(folder: str | Path) -> PreTrainedTokenizerBase:
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def copy_model_files(src: str | Path, dest: str | Path) -> None:
    """`src`'s tokenizer and generation config (its stop tokens) into `dest`, beside weights saved
    there: a folder written from a model object alone would derive stop tokens from config.json."""
    src, dest = Path(src), Path(dest)
    load_tokenizer(src).save_pretrained(dest)
    if (src / "generation_config.json").is_file():
        shutil.copyfile(src / "generation_config.json", dest / "generation_config.json")


@dataclass(frozen=True)
class ModelFacts:
    stop_token_ids: tuple[int, ...]
    """Generation ends after any of these: the tokenizer's EOS and the generation config's
    `eos_token_id` (a chat model may list several, e.g. end-of-turn and end-of-text)."""
    pad_token_id: int
    context_length: int | None
    """Prompt plus response tokens the model was built for (`max_position_embeddings`); None if unknown."""


def model_facts(folder: str | Path, tokenizer: PreTrainedTokenizerBase) -> ModelFacts:
    folder = Path(folder)
    stops: list[int] = [] if tokenizer.eos_token_id is None else [int(tokenizer.eos_token_id)]
    gen_file = folder / "generation_config.json"
    if gen_file.is_file():
        eos = json.loads(gen_file.read_text()).get("eos_token_id")
        for t in [eos] if isinstance(eos, int) else list(eos or []):
            if int(t) not in stops:
                stops.append(int(t))
    if not stops:
        raise ValueError(f"{folder}: the model names no end-of-sequence token (tokenizer or generation_config.json)")
    config = json.loads((folder / "config.json").read_text())
    config = config.get("text_config", config)  # multimodal wrappers keep the LM's settings inside
    length = next(
        (config[k] for k in ("max_position_embeddings", "n_positions", "max_sequence_length") if k in config), None
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[0]
    return ModelFacts(tuple(stops), int(pad), int(length) if length else None)
