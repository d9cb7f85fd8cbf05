"""How many rollout engines one actor holds, and the engine settings vLLM's GPU build cannot honour.

An actor serves every policy of the run (`actor.make_engines`): one engine per full policy, one per
group of LoRA policies on a shared base (`config.lora.lora_bases`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from atgrpo.config.lora import lora_bases

if TYPE_CHECKING:
    from atgrpo.config import RunConfig

VLLM_SLEEP_ONE_ENGINE = (
    "rollout.vllm_sleep_when_idle needs one vLLM engine per actor process on a GPU: vLLM 0.32's sleep mode "
    "allocates through its CuMem pool, a single instance per process whose second engine stops at start "
    '(vllm/v1/worker/gpu_worker.py: "CuMem allocator can only be used for one instance per process"), and '
    "that pool's sleep would move every engine's memory, not one's. Serve one full policy (or one LoRA group) "
    "per run with sleep, or set rollout.vllm_sleep_when_idle = false and give the actors their own GPUs"
)
"""Why several vLLM engines with sleep mode in one actor are refused (`check_engines`)."""


def engines_per_actor(cfg: RunConfig) -> int:
    """Engines one actor holds: its full policies, plus one per LoRA group."""
    groups = lora_bases(cfg)
    in_group = {p for g in groups for p in g}
    return len([p for p in cfg.policies if p not in in_group]) + len(groups)


def check_engines(cfg: RunConfig) -> None:
    """ValueError for engine settings an actor cannot run (called by `RunConfig`'s validation)."""
    ro = cfg.rollout
    sleeping = ro.engine == "vllm" and ro.vllm_sleep_when_idle and ro.device.startswith("cuda")
    if sleeping and engines_per_actor(cfg) > 1:
        raise ValueError(
            f"{engines_per_actor(cfg)} vLLM engines per actor ({sorted(cfg.policies)}): {VLLM_SLEEP_ONE_ENGINE}"
        )


__all__ = ["VLLM_SLEEP_ONE_ENGINE", "check_engines", "engines_per_actor"]
