"""`policies.<p>.lora`: typed fields, groups of policies sharing a base, and the rules LoRA adds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from atgrpo.config import load_config
from atgrpo.config.lora import lora_bases, serving_rank, warm_starts_adapter

TWO = ["warmstart.steps=0", "role_policy={plan='a', tool='b'}"]


def test_groups_by_equal_base():
    cfg = load_config(None, [*TWO, "policies.a.lora={r=8}", "policies.b.lora={r=16, alpha=4.0}"])
    assert lora_bases(cfg) == [["a", "b"]] and serving_rank(cfg, ["a", "b"]) == 16
    assert cfg.policies["b"].lora.alpha == 4.0 and cfg.policies["a"].lora.target_modules[0] == "q_proj"
    other = load_config(None, [*TWO, "policies.a.lora={r=8}", "policies.b.lora={r=3}", "policies.b.tiny.seed=1"])
    assert lora_bases(other) == [["a"], ["b"]]  # different built weights: no shared base
    assert serving_rank(other, ["b"]) == 8  # vLLM serves 8, not 3
    mixed = load_config(None, [*TWO, "policies.a.lora={r=8}", "policies.b.lr=1e-4"])  # a LoRA policy beside a full one
    assert lora_bases(mixed) == [["a"]] and mixed.policies["b"].lora is None
    assert load_config(None, ["warmstart.steps=0", "policies.shared.lora={}"]).policies["shared"].lora.r == 8


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("policies.a.lora={r=0}", "greater than or equal to 1"),
        ("policies.a.lora={dropout=1.0}", "less than 1"),
        ("policies.a.lora={target_modules=['lm_head']}", "linear layers inside the decoder"),
        ("policies.a.lora={target_modules=[]}", "linear layers inside the decoder"),
        ("policies.a.lora={rank=8}", "Extra inputs"),
        ("policies.a.lora={r=1024}", "vLLM serves ranks up to 512"),
    ],
)
def test_bad_lora_settings_are_refused(override, message):
    with pytest.raises(ValidationError, match=message):
        load_config(None, [*TWO, "rollout.engine='vllm'", "policies.b.lr=1e-4", override])


def test_zero3_is_refused_with_lora_and_the_warm_start_goes_to_the_adapter():
    # planpath warm-starts by default: a LoRA policy's adapter (never its base), under the full model's rule
    cfg = load_config(None, ["policies.shared.lora={}"])
    assert warm_starts_adapter(cfg, "shared")
    assert not warm_starts_adapter(load_config(None, ["policies.shared.lora={}", "warmstart.steps=0"]), "shared")
    assert not warm_starts_adapter(
        load_config(None, ["policies.shared.lora={}", "policies.shared.path='/x'"]), "shared"
    )
    assert warm_starts_adapter(
        load_config(None, ["policies.shared.lora={}", "policies.shared.path='/x'", "warmstart.pretrained=true"]),
        "shared",
    )
    assert not warm_starts_adapter(load_config(), "shared")  # a full policy: its model is warm-started instead
    with pytest.raises(ValidationError, match="ZeRO-3 partitions parameters"):
        load_config(
            None, ["warmstart.steps=0", "policies.shared.lora={}", "train.backend='deepspeed'", "train.zero_stage=3"]
        )
    # the KL reference of an adapter is its base with the adapters off (learner.lora.BaseReference)
    assert load_config(None, ["warmstart.steps=0", "policies.shared.lora={}", "train.kl_coef=0.1"]).train.kl_coef == 0.1
    assert load_config(None, ["policies.shared.lora={}", "policies.shared.path='/x'"]).policies["shared"].path == "/x"


def test_lora_config_round_trips_through_toml(tmp_path):
    """A run resumes from its written config.toml: a LoRA section (and a full policy's None) reads back equal."""
    cfg = load_config(
        None, [*TWO, "policies.a.lora={r=8, target_modules=['q_proj','down_proj']}", "policies.b.lr=1e-4"]
    )
    path = tmp_path / "config.toml"
    path.write_text(cfg.to_toml())
    assert load_config(path) == cfg
