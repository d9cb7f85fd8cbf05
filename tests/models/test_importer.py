"""`atgrpo-model import`: GGUF and HF sources become clean local HF folders; bad sources are typed errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from atgrpo.config import load_config
from atgrpo.models.importer import ModelImportError, check_clean_folder, import_model, resolve_model_path
from atgrpo.paths import policy_dir


def test_the_smollm2_import_is_a_clean_chat_model(smollm2):
    check_clean_folder(smollm2)
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float32"
    gen = json.loads((smollm2 / "generation_config.json").read_text())
    assert gen["eos_token_id"] == 2 and gen["pad_token_id"] == 2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2)
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    weights = load_file(smollm2 / "model.safetensors")
    assert all(t.dtype == torch.float32 for t in weights.values())
    assert 130e6 < sum(t.numel() for t in weights.values()) < 140e6


def test_an_hf_folder_imports_to_the_same_weights(smollm2, tmp_path):
    dest = import_model(smollm2, tmp_path / "copy")
    check_clean_folder(dest)
    a, b = load_file(smollm2 / "model.safetensors"), load_file(dest / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_quantization_record_is_dropped(smollm2, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in smollm2.iterdir():
        (src / f.name).symlink_to(f)
    (src / "config.json").unlink()
    config = json.loads((smollm2 / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "gguf"}}))
    with pytest.raises(ModelImportError, match="quantization_config"):
        check_clean_folder(src)
    check_clean_folder(import_model(src, tmp_path / "clean"))


def test_bad_sources_and_existing_destinations_are_typed_errors(smollm2, tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(ModelImportError, match="expected a .gguf file or an HF folder"):
        import_model(tmp_path / "notes.txt", tmp_path / "out")
    with pytest.raises(ModelImportError, match="expected a .gguf file or an HF folder"):
        import_model(tmp_path / "missing", tmp_path / "out")
    (tmp_path / "taken").mkdir()
    with pytest.raises(ModelImportError, match="exists"):
        import_model(smollm2, tmp_path / "taken")
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())  # no half-built folder left


def test_the_cli_reports_a_bad_source_with_status_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "atgrpo.cli.model", "import", str(tmp_path / "nothing.gguf"), str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "atgrpo-model:" in proc.stderr


def test_a_config_may_name_the_cached_model(smollm2, tmp_path):
    assert resolve_model_path("@smollm2") == smollm2
    assert resolve_model_path("~/m") == resolve_model_path("~/m").expanduser()
    cfg = load_config(None, ['policies.shared.path="@smollm2"'])
    assert policy_dir(cfg, "shared") == smollm2
