"""Which LoRA policies share a frozen base, and the config rules LoRA adds.

Invariant: two LoRA policies share a base exactly when their base weights are equal by
construction: the same `path`, or no path and the same built `tiny` spec (same size and seed give
the same weights). Each group is held once in the learner and served by one engine in each actor
(`atgrpo.lora`). A full (non-LoRA) policy is never in a group, even on the same path: its weights
move, so it has its own model and engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from atgrpo.config import RunConfig

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""Ranks vLLM 0.32 can serve (`vllm.config.lora.MaxLoRARanks`); an engine's `max_lora_rank` is one of them."""

LORA_ZERO3 = (
    "train.zero_stage = 3 cannot train LoRA adapters: ZeRO-3 partitions parameters through hooks on the "
    "modules of the model it is given, and an adapter's layers live in the base shared by the group's "
    "policies, outside the adapter-only module each policy's engine owns; use zero_stage 0, 1 or 2 "
    "(the frozen base is not in the optimizer, so ZeRO-3 would save little)"
)
"""Why DeepSpeed ZeRO-3 and LoRA are refused (`check_lora`, and `learner.backends` for direct callers)."""


def lora_bases(cfg: "RunConfig") -> list[list[str]]:
    """The LoRA policies grouped by shared base, each group and the groups in sorted order."""
    groups: dict[str, list[str]] = {}
    for name in sorted(cfg.policies):
        pc = cfg.policies[name]
        if pc.lora is None:
            continue
        key = f"path:{pc.path}" if pc.path else f"tiny:{pc.tiny.model_dump_json()}"
        groups.setdefault(key, []).append(name)
    return sorted(groups.values())


def lora_group(cfg: "RunConfig", policy: str) -> list[str] | None:
    """The policies sharing `policy`'s base (itself included); None for a full policy."""
    return next((g for g in lora_bases(cfg) if policy in g), None)


def serving_rank(cfg: "RunConfig", group: list[str]) -> int:
    """vLLM's `max_lora_rank` for an engine serving `group`: the smallest servable rank >= every r."""
    need = max(cfg.policies[p].lora.r for p in group)  # type: ignore[union-attr]  # a LoRA group
    return next(r for r in VLLM_LORA_RANKS if r >= need)


def warm_starts_adapter(cfg: "RunConfig", policy: str) -> bool:
    """Whether LoRA policy `policy`'s adapter is warm-started on its roles' solver demonstrations
    before RL (`warmstart.prepare`): under the rule a full policy's model follows (a game task,
    `warmstart.steps` > 0, a built base or `warmstart.pretrained`). The base is never trained."""
    from atgrpo.config.task import GAME_TASKS

    pc, ws = cfg.policies[policy], cfg.warmstart
    return pc.lora is not None and ws.steps > 0 and cfg.task.task in GAME_TASKS and (pc.path is None or ws.pretrained)


def check_lora(cfg: "RunConfig") -> None:
    """ValueError for a LoRA setting the run cannot honour (called by `RunConfig`'s validation)."""
    lora = [p for p in sorted(cfg.policies) if cfg.policies[p].lora is not None]
    if not lora:
        return
    for p in lora:
        pc = cfg.policies[p]
        if cfg.rollout.engine == "vllm" and pc.lora.r > VLLM_LORA_RANKS[-1]:  # type: ignore[union-attr]
            raise ValueError(f"policies.{p}.lora.r = {pc.lora.r}: vLLM serves ranks up to {VLLM_LORA_RANKS[-1]}")  # type: ignore[union-attr]
    if cfg.train.backend == "deepspeed" and cfg.train.zero_stage == 3:
        raise ValueError(f"LoRA policies {lora}: {LORA_ZERO3}")


__all__ = [
    "LORA_ZERO3",
    "VLLM_LORA_RANKS",
    "check_lora",
    "lora_bases",
    "lora_group",
    "serving_rank",
    "warm_starts_adapter",
]
