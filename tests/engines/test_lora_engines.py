"""LoRA engines: every role is served with its own adapter, never the base nor another role's.

Two adapters with very different weights on one base, one engine for both: each role's greedy
completions and log-probs must be peft's for that role's adapter, far from the base's and from the
other adapter's; a new version replaces the old one (no stale adapter, no stale prefix cache)."""

from __future__ import annotations

from lora_cases import adapter, gaps, reference_models, two_role_config

from atgrpo.engines.base import SamplingParams
from atgrpo.engines.lora import AdapterEngine, open_adapter_engines
from atgrpo.models.tiny import TinyModelSpec, build_tiny_model

GREEDY = SamplingParams(max_new_tokens=12, greedy=True)
FP32_TOL = 1e-4
"""Mean |logp| gap allowed between the engine and peft in fp32: the same weights through different
kernels, rounding ~1e-6 relative on logits of magnitude ~10, accumulated over a few layers."""


def check_roles(engines, models, prompts, pad_id) -> dict[str, dict[str, float]]:
    """Per role: mean |logp gap| to peft with its own adapter, the other's, and the base."""
    out = {}
    for p in ("a", "b", "a"):  # a, then b, then a again: switching back must work too
        out[p] = gaps(models, p, prompts, engines[p].generate(prompts, GREEDY), pad_id)
    return out


def test_torch_engine_serves_each_role_its_own_adapter(tmp_path):
    model_dir = build_tiny_model(TinyModelSpec(hidden_size=64, num_layers=2, intermediate_size=128), tmp_path / "m")
    cfg = two_role_config(model_dir, "torch")
    opened = open_adapter_engines(cfg, ["a", "b"], model_dir, "float32")
    engines = {p: e for p, (e, _) in opened.items()}
    assert isinstance(engines["a"], AdapterEngine) and engines["a"].shared is engines["b"].shared  # one engine
    tok = opened["a"][1]
    prompts = [[5, 9, 13, 21], [7, 3, 11, 30, 12, 8]]
    for version in (1, 2):
        tensors = {p: adapter(cfg, model_dir, p, seed=10 * version + i, scale=0.3) for i, p in enumerate("ab")}
        for p in "ab":
            engines[p].load_weights(version, tensors[p])
            assert engines[p].version == version
        models = reference_models(cfg, model_dir, tensors)
        for p, gap in check_roles(engines, models, prompts, tok.pad_token_id).items():
            assert gap["own"] <= FP32_TOL, (version, p, gap)
            assert min(gap["other"], gap["base"]) > 100 * FP32_TOL, (version, p, gap)
