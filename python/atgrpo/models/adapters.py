"""LoRA adapters in peft's format: config, tensors on the wire, folders on disk, and the merge.

One format everywhere: an adapter's tensors are named as `peft.get_peft_model_state_dict` names
them (`base_model.model.<module path>.lora_A.weight`, no adapter name inside), which is what peft
saves in `adapter_model.safetensors` and what vLLM reads. The learner publishes them under these
names, actors write or copy them as they are, checkpoints save them as they are. Because the names
carry no adapter name, an adapter's identity travels beside them (the policy of a publish, the
`adapter` field of a learner checkpoint): a tensor set alone cannot tell two policies apart.

Merge: a LoRA layer computes W x + (alpha / r) B A x (no rsLoRA, no DoRA: `peft_config` turns both
off), so the merged weight is W + (alpha / r) B A, computed in float32.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from atgrpo.config import LoraSection

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PREFIX = "base_model.model."


def peft_config(section: LoraSection, base: str | Path | None = None):
    """The `peft.LoraConfig` of a `policies.<p>.lora` section (causal LM, no bias, plain scaling)."""
    from peft import LoraConfig

    return LoraConfig(
        r=section.r,
        lora_alpha=section.alpha,
        lora_dropout=section.dropout,
        target_modules=list(section.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
        use_rslora=False,
        use_dora=False,
        base_model_name_or_path=str(base) if base is not None else None,
    )


def scaling(section: LoraSection) -> float:
    return section.alpha / section.r


def write_adapter(
    folder: str | Path, section: LoraSection, tensors: dict[str, torch.Tensor], base: str | Path | None = None
) -> Path:
    """`tensors` (peft names) as a peft adapter folder that `PeftModel.from_pretrained` and vLLM load."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    peft_config(section, base).save_pretrained(str(folder))
    save_file({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, str(folder / ADAPTER_WEIGHTS))
    return folder


def read_adapter(folder: str | Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(adapter_config.json as a dict, tensors by peft name) of a peft adapter folder."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / ADAPTER_CONFIG).is_file() or not (folder / ADAPTER_WEIGHTS).is_file():
        raise FileNotFoundError(f"no peft adapter at {folder}: expected {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}")
    return json.loads((folder / ADAPTER_CONFIG).read_text()), load_file(str(folder / ADAPTER_WEIGHTS))


def merge_adapter(
    base: dict[str, torch.Tensor], adapter: dict[str, torch.Tensor], scale: float
) -> dict[str, torch.Tensor]:
    """The base state dict (HF names) with W + scale * B A for every adapted layer; other tensors
    are the base's own objects. A pair naming no base weight is a ValueError (a wrong base)."""
    merged = dict(base)
    for key, a in adapter.items():
        if ".lora_A." not in key:
            continue
        b = adapter[key.replace(".lora_A.", ".lora_B.")]
        target = key.removeprefix(_PREFIX).replace(".lora_A.weight", ".weight")
        if target not in base:
            raise ValueError(f"adapter tensor {key} adapts {target}, which the base model lacks")
        w = base[target]
        merged[target] = (w.float() + scale * (b.float() @ a.float())).to(w.dtype)
    return merged


def merge_into_folder(base_dir: str | Path, adapter_dir: str | Path, dest: str | Path) -> Path:
    """An HF folder at `dest`: `base_dir`'s model with the peft adapter of `adapter_dir` merged in
    (its tokenizer and generation config too), loadable by transformers, vLLM and `atgrpo-eval`."""
    from atgrpo.models.folder import copy_model_files, load_model

    config, tensors = read_adapter(adapter_dir)
    if config.get("use_rslora") or config.get("use_dora"):
        raise ValueError(f"{adapter_dir}: rsLoRA / DoRA adapters are not merged here (plain LoRA only)")
    model = load_model(base_dir)
    merged = merge_adapter(model.state_dict(), tensors, float(config["lora_alpha"]) / int(config["r"]))
    model.load_state_dict(merged)
    dest = Path(dest)
    model.save_pretrained(dest)
    copy_model_files(base_dir, dest)
    return dest


__all__ = [
    "ADAPTER_CONFIG",
    "ADAPTER_WEIGHTS",
    "merge_adapter",
    "merge_into_folder",
    "peft_config",
    "read_adapter",
    "scaling",
    "write_adapter",
]
