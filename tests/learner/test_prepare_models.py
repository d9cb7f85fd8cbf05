"""`prepare_models` with `warmstart.pretrained`: a path model is copied and warm-started under
out_dir, with its tokenizer and stop tokens; the source folder is never written."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from atgrpo.config import TinyModelSpec, load_config
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import policy_dir
from atgrpo.warmstart.prepare import prepare_models

SPEC = TinyModelSpec(hidden_size=32, num_layers=1, intermediate_size=64, num_heads=2, num_kv_heads=1)


def weights(folder) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def test_a_path_model_is_warm_started_as_a_copy(tmp_path):
    source = build_tiny_model(SPEC, tmp_path / "source")
    gen = json.loads((source / "generation_config.json").read_text())
    (source / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": [1, 5]}))
    before = {p.name: p.stat().st_mtime_ns for p in source.iterdir()}
    original = weights(source)
    sets = [
        f"policies.shared.path={json.dumps(str(source))}",
        f"run.out_dir={json.dumps(str(tmp_path / 'run'))}",
        "warmstart.pretrained=true",
        "warmstart.steps=2",
        "warmstart.batch_size=4",
        "task.env={width=6,height=6}",
    ]
    cfg = load_config(None, sets)
    folder = policy_dir(cfg, "shared")
    assert folder == tmp_path / "run" / "models" / "shared"
    prepare_models(cfg)
    trained = weights(folder)
    assert trained.keys() == original.keys()
    assert any(not torch.equal(trained[k], original[k]) for k in original)
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == [1, 5]
    assert (folder / "tokenizer.json").is_file()
    assert {p.name: p.stat().st_mtime_ns for p in source.iterdir()} == before  # source untouched
    assert all(torch.equal(weights(source)[k], original[k]) for k in original)
    prepare_models(cfg)  # prepared once: a second call keeps it
    assert all(torch.equal(weights(folder)[k], trained[k]) for k in trained)


def test_without_pretrained_a_path_model_is_used_in_place(tmp_path):
    source = build_tiny_model(SPEC, tmp_path / "source")
    cfg = load_config(
        None, [f"policies.shared.path={json.dumps(str(source))}", f"run.out_dir={json.dumps(str(tmp_path / 'run'))}"]
    )
    assert policy_dir(cfg, "shared") == source
    prepare_models(cfg)
    assert not (tmp_path / "run" / "models").exists()
