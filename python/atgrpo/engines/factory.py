"""Open the rollout engine a config asks for on a local model folder, with the model's own facts.

The one place that turns (`rollout.engine`, folder) into an engine: the actor, `atgrpo-eval` and
`atgrpo-bench` all call it, so stop tokens, pad token and context length come from the folder's
files the same way everywhere (`atgrpo.models.folder.model_facts`).
"""

from __future__ import annotations

from pathlib import Path

from atgrpo.config import RolloutSection, RunConfig
from atgrpo.devices import resolve_device
from atgrpo.engines.base import RolloutEngine, SamplingParams
from atgrpo.models.folder import ModelFacts, load_model, load_tokenizer, model_facts


def open_engine(
    folder: str | Path,
    rollout: RolloutSection,
    *,
    policy: str,
    dtype: str = "float32",
    version: int = -1,
    engines_per_process: int = 1,
) -> tuple[RolloutEngine, object]:
    """(engine, tokenizer) for `folder`, in `dtype` (a run's: `rollout_dtype(cfg)`). `engines_per_process`
    engines share the device's memory (vLLM on a GPU: each takes its share of
    `rollout.vllm_gpu_memory_utilization`)."""
    tokenizer = load_tokenizer(folder)
    facts = model_facts(folder, tokenizer)
    if rollout.engine == "vllm":
        from atgrpo.engines.vllm_engine import VllmEngine

        engine: RolloutEngine = VllmEngine(
            str(folder),
            policy=policy,
            facts=facts,
            dtype=dtype,
            device=rollout.device,
            version=version,
            gpu_memory_utilization=rollout.vllm_gpu_memory_utilization / max(1, engines_per_process),
            cpu_kv_cache_gb=rollout.vllm_cpu_kv_cache_gb,
            max_model_len=sequence_budget(facts, rollout),
            sleep_when_idle=rollout.vllm_sleep_when_idle,
        )
    else:
        from atgrpo.engines import torch_engine  # looked up at call time: tests substitute the class

        device = resolve_device(rollout.device, setting="rollout.device")
        model = load_model(folder, dtype=dtype, device=str(device))
        engine = torch_engine.TorchEngine(
            model,
            policy=policy,
            stop_token_ids=facts.stop_token_ids,
            pad_token_id=facts.pad_token_id,
            context_length=sequence_budget(facts, rollout),
            version=version,
        )
    return engine, tokenizer


def rollout_dtype(cfg: RunConfig) -> str:
    """The dtype a run's engines roll out in: `rollout.dtype`, or the learner's `train.dtype` when
    unset. Engines cast published weights to it (the learner publishes in `train.dtype`)."""
    return cfg.rollout.dtype or cfg.train.dtype


def sequence_budget(facts: ModelFacts, rollout: RolloutSection) -> int:
    """Tokens one sequence may hold in an engine: the longest prompt a turn may have
    (`rollout.max_prompt_tokens`) plus the largest response budget of any role (one engine serves
    every role of its policy), never more than the model's context."""
    want = rollout.max_prompt_tokens + rollout.longest_response
    return want if facts.context_length is None else min(want, facts.context_length)


def training_sampling(rollout: RolloutSection) -> SamplingParams:
    """How a run's rollouts sample (greedy units switch to argmax themselves; the turn loop gives an
    agent with its own budget, `rollout.max_new_tokens_per_role`, that budget)."""
    return SamplingParams(max_new_tokens=rollout.max_new_tokens, temperature=rollout.temperature, top_p=rollout.top_p)


__all__ = ["open_engine", "rollout_dtype", "sequence_budget", "training_sampling"]
