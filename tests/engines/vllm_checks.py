"""Every check of the vLLM engine on the real model, in one child process (see test_vllm_engine.py).

vLLM's in-process engine initialises torch.distributed and a process-wide config, so it runs apart
from the pytest process; one start serves all checks. Prints one JSON object of measurements.

    python vllm_checks.py MODEL_DIR OUT_JSON
"""

from __future__ import annotations

import json
import sys
import time

import torch

from atgrpo.config import RolloutSection
from atgrpo.engines.base import SamplingParams
from atgrpo.engines.factory import open_engine
from atgrpo.learner.logprob_check import learner_logprobs, logprob_mismatch
from atgrpo.models.folder import load_model, model_facts
from atgrpo.workflows.prompts import encode_prompt

T = 0.7


def perturbed(weights: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: v + 0.02 * v.abs().mean() * torch.randn(v.shape, generator=gen) for k, v in weights.items()}


def same_tokens_close_logprobs(a, b, tol: float = 1e-4) -> bool:
    return [o.token_ids for o in a] == [o.token_ids for o in b] and all(
        abs(x - y) <= tol for p, q in zip(a, b) for x, y in zip(p.logprobs, q.logprobs)
    )


def main(model_dir: str, out_path: str) -> None:
    torch.set_num_threads(2)
    res: dict = {}
    t0 = time.perf_counter()
    ro = RolloutSection(engine="vllm", vllm_cpu_kv_cache_gb=0.5)
    engine, tok = open_engine(model_dir, ro, policy="a", engines_per_process=2)
    res["start_s"] = time.perf_counter() - t0
    res["threads_restored"] = torch.set_num_threads.__module__ == "torch"
    hf = load_model(model_dir).eval()
    facts = model_facts(model_dir, tok)
    prompt = encode_prompt(tok, "Name three colours of the rainbow, in one line.", chat=True)
    res["prompt_starts_with_template"] = tok.decode(prompt[:3]).startswith("<|im_start|>")

    # K copies of one prompt: distinct completions; the same seed gives them again.
    k_params = SamplingParams(max_new_tokens=24, temperature=T)
    outs = engine.generate([prompt] * 4, k_params, seed=7)
    again = engine.generate([prompt] * 4, k_params, seed=7)
    other = engine.generate([prompt] * 4, k_params, seed=8)
    res["k_distinct"] = len({tuple(o.token_ids) for o in outs})
    res["same_seed_same"] = [o.token_ids for o in outs] == [o.token_ids for o in again] and [
        o.logprobs for o in outs
    ] == [o.logprobs for o in again]
    res["other_seed_differs"] = [o.token_ids for o in outs] != [o.token_ids for o in other]
    res["stops"] = list(facts.stop_token_ids)
    res["finished_end_on_stop"] = all(o.token_ids[-1] in facts.stop_token_ids for o in outs + other if o.finished)
    res["unfinished_lengths"] = [len(o.token_ids) for o in outs + other if not o.finished]
    res["lengths_match"] = all(len(o.token_ids) == len(o.logprobs) for o in outs + other)

    # Sampled logprobs against the learner's at T; greedy ones against the temperature-1 distribution.
    prompts = [encode_prompt(tok, f"Write one sentence about the number {i}.", chat=True) for i in range(8)]
    sampled = engine.generate(prompts, SamplingParams(max_new_tokens=32, temperature=T), seed=1)
    res["sampled_mismatch"] = logprob_mismatch(
        [o.logprobs for o in sampled], learner_logprobs(hf, prompts, sampled, T, facts.pad_token_id)
    )
    greedy = engine.generate(prompts[:4], SamplingParams(max_new_tokens=16, greedy=True))
    res["greedy_mismatch"] = logprob_mismatch(
        [o.logprobs for o in greedy], learner_logprobs(hf, prompts[:4], greedy, 1.0, facts.pad_token_id)
    )
    with torch.no_grad():  # greedy tokens are the argmax of the HF model's logits
        argmax_ok = []
        for p, o in zip(prompts[:4], greedy):
            ids = torch.tensor([p + o.token_ids])
            logits = hf(input_ids=ids).logits[0, len(p) - 1 : -1]
            argmax_ok.append(logits.argmax(-1).tolist() == o.token_ids)
    res["greedy_is_argmax"] = argmax_ok

    # Nucleus sampling: logprobs under the renormalised nucleus, never below the full distribution's.
    nucleus = engine.generate(prompts, SamplingParams(max_new_tokens=16, temperature=T, top_p=0.8), seed=3)
    full = learner_logprobs(hf, prompts, nucleus, T, facts.pad_token_id)
    gaps = [a - b for o, f in zip(nucleus, full) for a, b in zip(o.logprobs, f)]
    res["nucleus_gap_min"], res["nucleus_gap_max"] = min(gaps), max(gaps)

    # Reload: a long, prefix-cached prompt; perturbed weights change its output and match the learner
    # holding the same weights (no KV of the old weights reused); the originals restore it exactly.
    long_prompt = encode_prompt(
        tok,
        " ".join(f"Item {i} is a {['red', 'blue', 'green'][i % 3]} box." for i in range(40))
        + " Which colour is item 7?",
        chat=True,
    )
    res["long_prompt_tokens"] = len(long_prompt)
    lp = SamplingParams(max_new_tokens=16, temperature=T)
    before = engine.generate([long_prompt] * 2, lp, seed=5)
    original = {k: v.clone() for k, v in hf.state_dict().items()}
    noisy = perturbed(original, 0)
    reload_s = []
    t = time.perf_counter()
    engine.load_weights(1, noisy)
    reload_s.append(time.perf_counter() - t)
    during = engine.generate([long_prompt] * 2, lp, seed=5)
    res["perturbed_changes_output"] = [o.token_ids for o in during] != [o.token_ids for o in before] or max(
        abs(a - b) for x, y in zip(during, before) for a, b in zip(x.logprobs, y.logprobs)
    ) > 1e-2
    # Direct proof the engine computes with the new weights: its logprobs are far from the old
    # model's on the same tokens, and (below) within rounding of the new one's.
    res["perturbed_vs_old_mismatch"] = logprob_mismatch(
        [o.logprobs for o in during], learner_logprobs(hf, [long_prompt] * 2, during, T, facts.pad_token_id)
    )
    hf.load_state_dict(noisy)
    res["perturbed_mismatch"] = logprob_mismatch(
        [o.logprobs for o in during], learner_logprobs(hf, [long_prompt] * 2, during, T, facts.pad_token_id)
    )
    for swap in range(4):
        t = time.perf_counter()
        engine.load_weights(2 + swap, original if swap % 2 == 0 else noisy)
        reload_s.append(time.perf_counter() - t)
    engine.load_weights(9, original)
    after = engine.generate([long_prompt] * 2, lp, seed=5)
    res["restored_exactly"] = [(o.token_ids, o.logprobs) for o in after] == [(o.token_ids, o.logprobs) for o in before]
    res["version"] = engine.version
    res["reload_s"] = reload_s

    # A second engine (a second policy) in the same process: each keeps its own weights.
    second, _ = open_engine(model_dir, ro, policy="b", engines_per_process=2)
    second.load_weights(1, noisy)
    a_out = engine.generate([long_prompt] * 2, lp, seed=5)
    b_out = second.generate([long_prompt] * 2, lp, seed=5)
    # (Not bit-exact: engine a now serves the prompt from its prefix cache, a different kernel path.)
    res["two_engines_a_unchanged"] = same_tokens_close_logprobs(a_out, before)
    res["two_engines_b_is_perturbed"] = same_tokens_close_logprobs(b_out, during)
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":  # vLLM may spawn helpers, which re-import this file
    main(sys.argv[1], sys.argv[2])
