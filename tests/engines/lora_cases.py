"""Shared by the LoRA engine tests and their vLLM child process: two very different adapters, and
the reference each role must match (peft's model holding that role's adapter alone)."""

from __future__ import annotations

from pathlib import Path

import torch

from atgrpo.config import RunConfig, load_config
from atgrpo.learner.logprob_check import learner_logprobs, logprob_mismatch
from atgrpo.models.folder import load_model
from atgrpo.models.peft_models import AdapterWeights, attach_adapters


def two_role_config(model_dir: Path, engine: str, r: int = 8) -> RunConfig:
    return load_config(
        None,
        [
            f"policies.a.path='{model_dir}'",
            f"policies.b.path='{model_dir}'",
            "role_policy={plan='a', tool='b'}",
            f"policies.a.lora={{r={r}, alpha={2 * r}.0, target_modules=['q_proj','v_proj','o_proj','down_proj']}}",
            f"policies.b.lora={{r={r}, alpha={2 * r}.0, target_modules=['q_proj','v_proj','o_proj','down_proj']}}",
            f"rollout.engine='{engine}'",
            "rollout.vllm_cpu_kv_cache_gb=0.5",
            "rollout.max_prompt_tokens=256",
        ],
    )


def adapter(cfg: RunConfig, model_dir: Path, policy: str, seed: int, scale: float) -> dict[str, torch.Tensor]:
    """Random A and B (B is 0 at peft's start, which would make the adapter the base) of `policy`."""
    model = attach_adapters(load_model(model_dir), cfg, [policy])
    weights = AdapterWeights(model, policy)
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen) * scale for k, v in weights.state_dict().items()}


def reference_models(cfg: RunConfig, model_dir: Path, tensors: dict[str, dict[str, torch.Tensor]]) -> dict:
    """None -> the base model, policy -> peft's model holding that policy's adapter alone (`tensors`)."""
    models: dict = {None: load_model(model_dir).eval()}
    for policy, t in tensors.items():
        model = attach_adapters(load_model(model_dir), cfg, [policy])
        AdapterWeights(model, policy).load_state_dict(t)
        models[policy] = model.eval()
    return models


def gaps(models: dict, policy: str, prompts, completions, pad_id: int) -> dict[str, float]:
    """Mean |logp gap| (temperature 1) of `completions` to peft with `policy`'s adapter ("own"), the
    other policy's ("other") and the base ("base")."""
    other = next(p for p in models if p not in (None, policy))
    got = [c.logprobs for c in completions]
    return {
        who: logprob_mismatch(got, learner_logprobs(models[key], prompts, completions, 1.0, pad_id))[0]
        for who, key in (("own", policy), ("other", other), ("base", None))
    }
