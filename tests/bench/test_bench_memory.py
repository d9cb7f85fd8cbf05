"""`atgrpo-bench memory`'s parts, cheaply: the recipe-shaped step it measures, and its cases run in
this process on the tiny model (the suite runs SmolLM2 on the 8192-token budget, one subprocess per case)."""

from __future__ import annotations

import pytest

from atgrpo.bench import memory
from atgrpo.config import load_config
from atgrpo.models.folder import load_tokenizer


def test_the_step_is_the_recipes_shape_and_fills_the_budget(smollm2):
    cfg = load_config(memory.RECIPE)
    assert cfg.train.micro_batch_tokens == 8192 and cfg.policies["shared"].path == "@smollm2"
    budget = 1000
    samples = memory.recipe_samples(cfg, load_tokenizer(smollm2), budget)
    tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    per_env = 2 * cfg.rollout.k  # two roles, k candidates each, one turn
    assert len(samples) % per_env == 0 and budget - 3 * 60 * per_env < tokens <= budget
    assert all(len(s.response_ids) == cfg.rollout.max_new_tokens for s in samples)
    assert all(10 < len(s.prompt_ids) < 100 for s in samples)  # the compact prompts
    groups: dict[tuple, set] = {}
    for s in samples:
        groups.setdefault((s.step, s.key.env, s.role), set()).add(tuple(s.prompt_ids))
    assert all(len(p) == 1 for p in groups.values())  # the k candidates of a group share their prompt
    with pytest.raises(ValueError, match="holds no env"):
        memory.recipe_samples(cfg, load_tokenizer(smollm2), 100)


def test_one_case_reports_its_figures(tmp_path, monkeypatch):
    """A case's plumbing on the tiny model standing in for SmolLM2 (a SmolLM2 step takes minutes here)."""
    import pickle

    from atgrpo.config import TinyModelSpec
    from atgrpo.models import importer
    from atgrpo.models.tiny import build_tiny_model

    folder = build_tiny_model(
        TinyModelSpec(hidden_size=32, num_layers=2, intermediate_size=64, num_heads=2, num_kv_heads=1),
        tmp_path / "tiny",
    )
    monkeypatch.setattr(importer, "smollm2_folder", lambda: folder)
    cfg = load_config(memory.RECIPE)
    path = tmp_path / "samples.pkl"
    path.write_bytes(pickle.dumps(memory.recipe_samples(cfg, load_tokenizer(folder), 2000)))
    for variant in memory.VARIANTS.values():
        got = memory.run_case(path, True, variant, 2000)
        assert got["micro_batches"] == 1 and got["step_s"] > 0 and got["positions"] > 0
        # the kernel syncs its per-CPU RSS counters lazily: the peak may trail a reading by a few pages
        assert got["peak_gb"] >= got["rss_before_step_gb"] - 0.01 and got["rss_before_step_gb"] > 0
    assert memory.main(["--bad"]) == 2
