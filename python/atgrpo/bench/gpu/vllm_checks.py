"""The vLLM part of `atgrpo-bench gpu`, in a process of its own:

    python -m atgrpo.bench.gpu.vllm_checks MODEL_FOLDER OUT.json [--device cuda] [--quick]

Why a child: vLLM checks at start that the share of GPU memory it asks for is free, and sizes its
KV cache from what it measures; the parent's torch engine, learner step and scale runs leave
memory behind. A clean process measures a clean GPU, and a vLLM failure ends the child, not the
report. Every check is the engine as the actor drives it (`VllmEngine`), with the run's publish
path: weights go in as the learner publishes them, each tied tensor once (`models.tied`).

`CHECKS` says what each result checks; the parent prints it under the table. On the CPU build
(`--device cpu`) everything runs except sleep, which vLLM's CPU worker does not do (the engine
never sleeps there).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

CHECKS = {
    "runner": "which model runner vLLM chose: 0.32 on CUDA runs Model Runner V2 unless a feature needs V1; "
    "the CPU build (CI's tests) runs V1, so this line says whether the GPU run covered what CI cannot",
    "mismatch": "the engine's log-probs of its sampled tokens against the learner's forward on the same tokens "
    "(processed_logprobs at temperature 0.7; mean |delta| must be <= 1e-3, as for the torch engine)",
    "reload": "weights published as the learner publishes them (each tied tensor once) reloaded in place through "
    "the worker's reload_weights: how long it takes, and how many greedy outputs change (0 is an error)",
    "restored": "the original weights reloaded: how many greedy outputs are the first ones again (all expected)",
    "sleep": "sleep (level 1) then wake_up, as a colocated actor does between units: GB of GPU memory the sleep "
    "freed, and how many greedy outputs are the same after waking (all expected)",
}
UTILIZATION = 0.4
"""GPU memory share the checked engine asks for: room for the parent's CUDA context and leftovers."""
NEW_TOKENS = 32
TEMPERATURE = 0.7


def _runner(engine) -> str:
    config = getattr(getattr(engine.llm, "llm_engine", None), "vllm_config", None)
    v2 = getattr(config, "use_v2_model_runner", None)
    return "unknown (vLLM did not say)" if v2 is None else ("V2" if v2 else "V1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m atgrpo.bench.gpu.vllm_checks")
    parser.add_argument("folder")
    parser.add_argument("out")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)

    from atgrpo.config import RolloutSection
    from atgrpo.engines.base import SamplingParams
    from atgrpo.engines.errors import VllmUnavailableError
    from atgrpo.engines.factory import open_engine
    from atgrpo.learner.logprob_check import learner_logprobs, logprob_mismatch
    from atgrpo.models.folder import load_model
    from atgrpo.models.tied import without_aliases
    from atgrpo.workflows.prompts import encode_prompt

    on_gpu = args.device.startswith("cuda")
    ro = RolloutSection(
        engine="vllm",
        device=args.device,
        vllm_gpu_memory_utilization=UTILIZATION,
        vllm_sleep_when_idle=on_gpu,
        vllm_cpu_kv_cache_gb=0.5,
        max_prompt_tokens=512,
        max_new_tokens=NEW_TOKENS,
    )
    start = time.perf_counter()
    try:
        engine, tok = open_engine(args.folder, ro, policy="check")
    except VllmUnavailableError as exc:
        print(f"gpu check: vLLM not checked: {exc}")
        return 0
    out: dict = {"start_s": time.perf_counter() - start, "runner": _runner(engine)}
    n = 4 if args.quick else 16
    prompts = [encode_prompt(tok, f"Count from {i} to {i + 5}, then say done.", chat=True) for i in range(n)]
    model = load_model(args.folder, device=args.device).eval()
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0

    sampled = engine.generate(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, temperature=TEMPERATURE), seed=0)
    mean, worst, tokens = logprob_mismatch(
        [o.logprobs for o in sampled], learner_logprobs(model, prompts, sampled, TEMPERATURE, pad)
    )
    out["mismatch"] = {"mean": mean, "max": worst, "tokens": tokens}

    greedy = SamplingParams(max_new_tokens=NEW_TOKENS, greedy=True)
    before = [o.token_ids for o in engine.generate(prompts, greedy)]
    original = without_aliases(model, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()})
    gen = torch.Generator().manual_seed(0)
    moved = {
        k: v + 0.02 * torch.randn(v.shape, generator=gen, dtype=v.dtype) if v.is_floating_point() else v
        for k, v in original.items()
    }
    t = time.perf_counter()
    engine.load_weights(1, moved)
    reload_s = time.perf_counter() - t
    changed = sum(a != o.token_ids for a, o in zip(before, engine.generate(prompts, greedy)))
    out["reload"] = {"seconds": reload_s, "changed": changed, "prompts": n, "tensors": len(moved)}
    engine.load_weights(2, original)
    out["restored"] = {
        "same": sum(a == o.token_ids for a, o in zip(before, engine.generate(prompts, greedy))),
        "prompts": n,
    }

    if on_gpu:
        torch.cuda.synchronize()
        free_awake = torch.cuda.mem_get_info()[0]
        engine.sleep()
        torch.cuda.synchronize()
        freed_gb = (torch.cuda.mem_get_info()[0] - free_awake) / 1e9
        after = [o.token_ids for o in engine.generate(prompts, greedy)]  # generate wakes it first
        out["sleep"] = {"freed_gb": freed_gb, "same": sum(a == b for a, b in zip(before, after)), "prompts": n}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    if not changed:
        print("gpu check: vLLM gave the same greedy outputs after new weights were loaded", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # vLLM may spawn helpers, which re-import this file
    raise SystemExit(main())
