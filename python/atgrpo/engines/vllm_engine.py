"""vLLM rollout engine: a thin adapter, imported only when `rollout.engine = "vllm"`.

UNTESTED here (the development machines have no GPU). It maps `RolloutEngine` onto vLLM's offline
`LLM`: token-id prompts in, token ids and the sampled tokens' log-probabilities out, and
`load_weights` reloads the weights in place through the model's own `load_weights` (no restart),
which vLLM exposes on the driver worker in the single-GPU, in-process configuration used here.
"""

from __future__ import annotations

import torch

from atgrpo.engines.base import Completion, RolloutEngine, SamplingParams


class VllmEngine(RolloutEngine):
    def __init__(self, model_dir: str, *, policy: str, version: int = -1, gpu_memory_utilization: float = 0.5) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise ImportError("rollout.engine = 'vllm' needs vllm installed (pip install vllm) and a GPU") from exc
        self.llm = LLM(model=model_dir, gpu_memory_utilization=gpu_memory_utilization, enable_prefix_caching=True)
        self.policy = policy
        self.version = version

    def generate(self, prompts: list[list[int]], params: SamplingParams, seed: int | None = None) -> list[Completion]:
        from vllm import SamplingParams as VllmParams
        from vllm.inputs import TokensPrompt

        sp = VllmParams(
            max_tokens=params.max_new_tokens,
            temperature=0.0 if params.greedy else params.temperature,
            top_p=params.top_p,
            logprobs=0,  # the sampled token's own log-probability
            seed=seed,
            stop_token_ids=list(params.stop_token_ids),
        )
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp, use_tqdm=False)
        result = []
        for out in outs:
            o = out.outputs[0]
            ids = list(o.token_ids)
            lps = [float(step[t].logprob) for t, step in zip(ids, o.logprobs or [])]
            result.append(Completion(ids, lps, o.finish_reason == "stop"))
        return result

    def load_weights(self, version: int, tensors: dict[str, torch.Tensor]) -> None:
        worker = self.llm.llm_engine.model_executor.driver_worker
        runner = getattr(worker, "model_runner", None) or worker.worker.model_runner
        runner.model.load_weights(weights=list(tensors.items()))
        self.version = version
