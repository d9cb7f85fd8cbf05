"""Rollout engines of LoRA policies: one engine per shared base, one adapter per policy on it.

A group of LoRA policies on one base (`config.lora.lora_bases`) is served in an actor by ONE engine
holding the base once; each policy sees it through an `AdapterEngine` (a `RolloutEngine` with the
policy's own version), so the actor and the workflows need not know LoRA exists. Weights that
arrive for a policy are its adapter's tensors only (peft names, `models.adapters`).

Invariants:
- Every `generate` runs one policy's prompts under that policy's adapter, never the base and never
  another adapter. An engine serving adapters serves nothing else: vLLM 0.32 silently gives a base
  request batched with LoRA requests an adapter's delta (its "no LoRA" index wraps to the last slot).
- torch: the shared PeftModel's `set_adapter` before each call; adapters are copied in place.
- vLLM: each (policy, version) is a new adapter in vLLM's eyes, a new name, id and folder (in
  tmpfs where there is one). A reused id without `load_inplace` would keep the old weights, and
  the prefix cache is keyed by name and path, so nothing of an old version can be served; the
  prefix cache is reset too, and the old version's id is removed from the engine.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import weakref
from pathlib import Path

import torch

from atgrpo.config import RunConfig
from atgrpo.config.lora import serving_rank
from atgrpo.engines.base import Completion, RolloutEngine, SamplingParams
from atgrpo.engines.factory import sequence_budget
from atgrpo.models.adapters import write_adapter
from atgrpo.models.folder import load_model, load_tokenizer, model_facts
from atgrpo.models.peft_models import AdapterWeights, attach_adapters

CPU_LORA_MAX_BATCH = 16
"""Sequences a vLLM LoRA engine schedules at once on CPU (`SharedVllmLora`)."""


class AdapterEngine(RolloutEngine):
    """One LoRA policy's view of its group's shared engine."""

    def __init__(self, shared: "SharedTorchLora | SharedVllmLora", policy: str) -> None:
        self.shared = shared
        self.policy = policy
        self.version = -1

    @property
    def stats(self):
        return self.shared.stats

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Completion]:
        return self.shared.generate(self.policy, prompts, params, seed)

    def load_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        """`tensors`: the policy's adapter (peft names), installed as `version`."""
        self.shared.load_adapter(self.policy, version, tensors)
        self.version = version

    def sleep(self) -> None:
        self.shared.sleep()

    def wake(self) -> None:
        self.shared.wake()


class SharedTorchLora:
    """A torch engine over a PeftModel holding one adapter per policy of the group."""

    def __init__(self, cfg: RunConfig, group: list[str], folder: Path, dtype: str, device: str) -> None:
        from atgrpo.engines import torch_engine

        facts = model_facts(folder, load_tokenizer(folder))
        model = attach_adapters(load_model(folder, dtype=dtype, device=device), cfg, group, folder)
        self.adapters = {p: AdapterWeights(model, p) for p in group}
        self.engine = torch_engine.TorchEngine(
            model,
            policy="+".join(group),
            stop_token_ids=facts.stop_token_ids,
            pad_token_id=facts.pad_token_id,
            context_length=sequence_budget(facts, cfg.rollout),
        )
        self.stats = self.engine.stats

    def generate(self, policy: str, prompts, params, seed):
        self.adapters[policy].activate()
        return self.engine.generate(prompts, params, seed)

    def load_adapter(self, policy: str, version: int, tensors: dict[str, torch.Tensor]) -> None:
        self.adapters[policy].load_state_dict(tensors)

    def sleep(self) -> None:
        pass

    def wake(self) -> None:
        pass


class SharedVllmLora:
    """One vLLM engine with LoRA on: every policy of the group is an adapter request on it."""

    def __init__(self, cfg: RunConfig, group: list[str], folder: Path, dtype: str, memory_share: float) -> None:
        from atgrpo.engines.vllm_engine import VllmEngine

        facts = model_facts(folder, load_tokenizer(folder))
        r = cfg.rollout
        # vLLM's CPU LoRA ops work over the whole scheduled batch width: with 256 sequences a short
        # generate (SmolLM2, 2 prompts, 16 tokens) took 27-96 s here against 3-13 s with 16. GPUs keep the default.
        batch = {"max_batch": CPU_LORA_MAX_BATCH} if r.device == "cpu" else {}
        self.engine = VllmEngine(
            str(folder),
            policy="+".join(group),
            facts=facts,
            dtype=dtype,
            device=r.device,
            **batch,
            gpu_memory_utilization=r.vllm_gpu_memory_utilization * memory_share,
            cpu_kv_cache_gb=r.vllm_cpu_kv_cache_gb,
            max_model_len=sequence_budget(facts, r),
            sleep_when_idle=r.vllm_sleep_when_idle,
            lora=(serving_rank(cfg, group), len(group)),
        )
        self.stats = self.engine.stats
        self.sections = {p: cfg.policies[p].lora for p in group}
        self.base = folder
        shm = Path("/dev/shm")
        self.root = Path(tempfile.mkdtemp(prefix="atgrpo-lora-", dir=shm if shm.is_dir() else None))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, True)
        self._ids = itertools.count(1)
        self.requests: dict[str, object] = {}

    def generate(self, policy: str, prompts, params, seed):
        request = self.requests.get(policy)
        if request is None:
            raise RuntimeError(f"no adapter of policy {policy} loaded yet: the base model is never served alone")
        return self.engine.generate(prompts, params, seed, lora_request=request)

    def load_adapter(self, policy: str, version: int, tensors: dict[str, torch.Tensor]) -> None:
        from vllm.lora.request import LoRARequest

        lid = next(self._ids)
        folder = write_adapter(self.root / policy / f"v{version}-{lid}", self.sections[policy], tensors, self.base)  # type: ignore[arg-type]
        self.engine.wake()
        old = self.requests.get(policy)
        self.requests[policy] = LoRARequest(f"{policy}@v{version}#{lid}", lid, str(folder))
        if old is not None:
            self.engine.llm.llm_engine.remove_lora(old.lora_int_id)  # type: ignore[attr-defined]
            shutil.rmtree(old.lora_path, ignore_errors=True)  # type: ignore[attr-defined]
        self.engine.llm.reset_prefix_cache()

    def sleep(self) -> None:
        self.engine.sleep()

    def wake(self) -> None:
        self.engine.wake()


def open_adapter_engines(
    cfg: RunConfig,
    group: list[str],
    folder: Path,
    dtype: str,
    memory_share: float = 1.0,
) -> dict[str, tuple[AdapterEngine, object]]:
    """Policy -> (its engine view, tokenizer) for a LoRA group, served by one engine on `folder`
    (`rollout.engine`); `memory_share`: the fraction of vLLM's GPU memory setting it may take."""
    from atgrpo.devices import resolve_device

    if cfg.rollout.engine == "vllm":
        shared: SharedTorchLora | SharedVllmLora = SharedVllmLora(cfg, group, folder, dtype, memory_share)
    else:
        shared = SharedTorchLora(
            cfg, group, folder, dtype, str(resolve_device(cfg.rollout.device, setting="rollout.device"))
        )
    tokenizer = load_tokenizer(folder)
    return {p: (AdapterEngine(shared, p), tokenizer) for p in group}


__all__ = ["AdapterEngine", "SharedTorchLora", "SharedVllmLora", "open_adapter_engines"]
