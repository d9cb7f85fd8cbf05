"""The LoRA SmolLM2 recipe is the full-model recipe with one adapter per role, and `atgrpo-bench lora`
picks the recipe's engine by the rollout step it measures (the measuring itself needs minutes of
SmolLM2 on two engines: docs/lora.md)."""

from __future__ import annotations

from pathlib import Path

from atgrpo.bench import lora
from atgrpo.bench.learning.suites import CONFIGS
from atgrpo.config import load_config
from atgrpo.config.lora import lora_bases, warm_starts_adapter


def test_the_lora_recipe_is_the_full_recipe_with_an_adapter_per_role() -> None:
    full, mine = load_config(CONFIGS / "train_smollm2.toml"), load_config(lora.RECIPE)
    budget = ("steps", "eval_every", "eval_seeds", "checkpoint_every")
    assert all(getattr(mine.run, k) == getattr(full.run, k) for k in budget)
    # The adapters' warm start takes twice the full model's steps, paid for out of RL's time limit.
    assert 0 < mine.run.time_limit_s < full.run.time_limit_s
    assert mine.task == full.task and mine.launch == full.launch
    assert mine.rollout.model_copy(update={"engine": full.rollout.engine}) == full.rollout  # the engine: measured
    assert (
        mine.warmstart.steps,
        mine.warmstart.batch_size,
        mine.warmstart.pretrained,
    ) == (2 * full.warmstart.steps, full.warmstart.batch_size, True)
    assert mine.agent_policy() == {"tool": "tool", "plan": "plan"} and lora_bases(mine) == [["plan", "tool"]]
    assert all(pc.path == "@smollm2" and pc.lora is not None for pc in mine.policies.values())
    assert all(warm_starts_adapter(mine, p) for p in mine.policies)  # the adapters learn the format first


def test_the_faster_engine_is_the_recipes_target() -> None:
    arm = {"step_s": 10.0, "generate_s": 8.0, "cpu_s": 15.0, "tok_s": 50.0, "start_s": 3.0}
    slow = {**arm, "step_s": 40.0, "generate_s": 38.0, "cpu_s": 60.0, "tok_s": 12.5, "start_s": 60.0}
    rows = lora.engine_rows({"torch": arm, "vllm": slow}, "torch")
    assert lora.faster_engine({"torch": arm, "vllm": slow}) == "torch"
    step = rows[0]
    assert step.target_met is True and step.ratio == 0.25  # vLLM's step against torch's: 4x slower
    assert lora.engine_rows({"torch": arm, "vllm": slow}, "vllm")[0].target_met is False
    assert lora.engine_rows({"torch": slow, "vllm": arm}, "vllm")[0].target_met is True
    assert rows[2].ratio == 0.25 and rows[3].ratio == 0.25  # CPU seconds; tokens/s, higher is better


def test_the_recipe_config_points_both_adapters_at_the_model(tmp_path: Path) -> None:
    cfg = lora.recipe_config(Path("/models/smol"), tmp_path, "vllm")
    assert cfg.rollout.engine == "vllm" and cfg.warmstart.steps == 0
    assert {pc.path for pc in cfg.policies.values()} == {"/models/smol"}
