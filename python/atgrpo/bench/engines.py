"""`atgrpo-bench engines`: the rollout engines on the real model (SmolLM2-135M-Instruct), all in one run.

- Decoding throughput of the vLLM engine and the torch engine against transformers' `generate`, at
  batch 16 and 64, 64 new tokens (`--quick`: batch 4, 16 tokens, one repeat). Greedy decoding;
  tokens/s counts generated tokens, stop tokens included.
- Token identity: whether each engine's greedy tokens equal transformers' on the same prompts
  (sequences identical, and the mean share of tokens before the first difference). fp32 greedy
  decoding agrees until two candidates are within rounding of each other, after which the texts
  part; the row shows how often that happened rather than assuming the three did the same work.
- One in-place weight reload of each engine, against starting the engine afresh (what a system
  without in-place reload pays per version).
- The engine-versus-learner log-probability mismatch (mean |Δ| per token, fp32, T = 0.7), against
  the 1e-3 bound the system tests hold it to.

The vLLM part needs vLLM (the README set-up installs its CPU build); it runs in this process
(in-process engine core), so this suite runs last in `atgrpo-bench all`. Every engine uses all cores.
"""

from __future__ import annotations

import os
import statistics
import time

from atgrpo.bench.report import BenchRow

SUITE = "engines"
NEW_TOKENS = 64
TEMPERATURE = 0.7
MISMATCH_BOUND = 1e-3


def _prompts(tokenizer, n: int) -> list[list[int]]:
    from atgrpo.workflows.prompts import encode_prompt

    topics = ["the sea", "a mountain", "bread", "a clock", "rain", "a library", "trains", "the moon"]
    return [
        encode_prompt(tokenizer, f"Write a short story about {topics[i % 8]}, number {i}.", chat=True) for i in range(n)
    ]


def _hf_generate(model, prompts: list[list[int]], new_tokens: int, facts) -> list[list[int]]:
    """transformers' own `generate`, greedy, left-padded batch; each prompt's generated tokens up to
    and including its first stop token."""
    import torch

    pad_id, stops = facts.pad_token_id, facts.stop_token_ids
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=pad_id,
            eos_token_id=list(stops),
        )
    seqs = []
    for row in out[:, width:].tolist():
        stop_at = next((j for j, t in enumerate(row) if t in stops), None)
        seqs.append(row if stop_at is None else row[: stop_at + 1])
    return seqs


def _timed(fn, repeats: int) -> tuple[float, list[list[int]]]:
    """(median seconds, token sequences of the last call) over `repeats` calls after one warm-up."""
    fn()
    times: list[float] = []
    seqs: list[list[int]] = []
    for _ in range(repeats):
        start = time.perf_counter()
        seqs = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), seqs


def token_identity(got: list[list[int]], want: list[list[int]]) -> tuple[float, float]:
    """(share of sequences identical to `want`'s, mean share of `want`'s tokens before the first
    difference) of two lists of token sequences for the same prompts."""
    if len(got) != len(want) or not want:
        raise ValueError(f"token identity needs the same prompts: {len(got)} sequences against {len(want)}")
    same, prefix = 0, 0.0
    for g, w in zip(got, want):
        same += g == w
        agree = next((i for i, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
        prefix += agree / max(len(w), 1)
    return same / len(want), prefix / len(want)


def run(quick: bool) -> list[BenchRow]:
    import torch

    from atgrpo.config import RolloutSection
    from atgrpo.engines.base import SamplingParams
    from atgrpo.engines.factory import open_engine
    from atgrpo.models.folder import load_model, model_facts
    from atgrpo.models.importer import smollm2_folder

    torch.set_num_threads(os.cpu_count() or 1)
    folder = smollm2_folder()
    repeats = 1 if quick else 3
    batches = (4,) if quick else (16, 64)
    new_tokens = 16 if quick else NEW_TOKENS
    hf = load_model(folder).eval()
    start = time.perf_counter()
    vllm_engine, tok = open_engine(folder, RolloutSection(engine="vllm"), policy="bench")
    vllm_start_s = time.perf_counter() - start
    start = time.perf_counter()
    torch_engine, _ = open_engine(folder, RolloutSection(engine="torch"), policy="bench")
    torch_start_s = time.perf_counter() - start
    facts = model_facts(folder, tok)
    greedy = SamplingParams(max_new_tokens=new_tokens, greedy=True)
    rows: list[BenchRow] = []
    for batch in batches:
        prompts = _prompts(tok, batch)
        ref_s, ref_seqs = _timed(lambda: _hf_generate(hf, prompts, new_tokens, facts), repeats)
        ref_tokens = sum(map(len, ref_seqs))
        for name, engine in (("vllm", vllm_engine), ("torch", torch_engine)):

            def gen(engine=engine) -> list[list[int]]:
                return [list(c.token_ids) for c in engine.generate(prompts, greedy)]

            secs, seqs = _timed(gen, repeats)
            tokens = sum(map(len, seqs))
            identical, prefix = token_identity(seqs, ref_seqs)
            rows.append(
                BenchRow(
                    SUITE,
                    f"{name} engine tokens/s, batch {batch}",
                    tokens / secs,
                    "tok/s",
                    "transformers generate",
                    ref_tokens / ref_s,
                    extra={
                        "tokens": tokens,
                        "reference_tokens": ref_tokens,
                        "identical_sequences": identical,
                        "agreeing_prefix": prefix,
                    },
                )
            )
            rows.append(
                BenchRow(
                    SUITE,
                    f"{name} engine greedy tokens identical to transformers, batch {batch}",
                    identical,
                    "share of sequences",
                    "all identical",
                    1.0,
                    extra={"agreeing_prefix": prefix},
                )
            )
    weights = {k: v.clone() for k, v in hf.state_dict().items()}
    for name, engine, start_s in (("vllm", vllm_engine, vllm_start_s), ("torch", torch_engine, torch_start_s)):
        reloads = []
        for v in range(repeats + 1):
            t = time.perf_counter()
            engine.load_weights(v + 1, weights)
            reloads.append(time.perf_counter() - t)
        rows.append(
            BenchRow(
                SUITE,
                f"{name} engine weight reload",
                statistics.median(reloads[1:]),
                "s",
                "engine start",
                start_s,
                higher_is_better=False,
            )
        )
    rows += _mismatch_rows(hf, tok, facts, new_tokens, vllm_engine, torch_engine)
    return rows


def _mismatch_rows(hf, tok, facts, new_tokens: int, *engines) -> list[BenchRow]:
    from atgrpo.engines.base import SamplingParams
    from atgrpo.learner.logprob_check import learner_logprobs, logprob_mismatch

    prompts = _prompts(tok, 16)
    rows = []
    for name, engine in zip(("vllm", "torch"), engines):
        outs = engine.generate(prompts, SamplingParams(max_new_tokens=new_tokens, temperature=TEMPERATURE), seed=0)
        learner = learner_logprobs(hf, prompts, outs, TEMPERATURE, facts.pad_token_id)
        mean, worst, tokens = logprob_mismatch([o.logprobs for o in outs], learner)
        rows.append(
            BenchRow(
                SUITE,
                f"{name} engine vs learner logprob mismatch",
                mean,
                "mean |Δ|",
                "bound",
                MISMATCH_BOUND,
                higher_is_better=False,
                target="<= 1e-3",
                target_met=mean <= MISMATCH_BOUND,
                extra={"max": worst, "tokens": tokens},
            )
        )
    return rows
