"""`atgrpo-bench memory`: peak resident memory and time of one learner step of the shipped SmolLM2
recipe (`envs/planpath/train_smollm2.toml`: SmolLM2-135M-Instruct, fp32, torch backend,
`micro_batch_tokens = 8192`), with `share_prefix` false and true, before and after issue 18's
memory work.

- Before (the reference): `train.logit_chunk_tokens = 0` (every position's logits at once, kept
  for backward, several [tokens x vocab] fp32 copies) and no gradient checkpointing: the
  computation the learner ran before chunking.
- After: the default chunked log-probs (`logit_chunk_tokens = 1024`), with and without
  `train.gradient_checkpointing` (off by default: it costs about one more forward pass).

Each case runs in a fresh subprocess (`python -m atgrpo.bench.memory --case ...`), whose peak
resident set (`ru_maxrss`: model, gradients, AdamW state and the step's transients) is the figure;
the step time is that one step's wall time (AdamW state is allocated in it, in every case alike).

The step's samples: the recipe's workflow renders its real prompts (8 envs per step x 2 roles x
k = 4, one turn; ~27 tokens each) and a stand-in engine answers each with `max_new_tokens` (24)
random tokens, the longest answer the recipe allows; one recipe step holds ~3.3k tokens, so
consecutive steps' envs are added (whole envs) until the plain layout fills the 8192-token
micro-batch, as a step with more envs would. Both layouts train on the same samples (the shared
layout packs them into fewer tokens). Advantages are drawn at random (they change no cost).
Per layout: the peak and the step time of each "after" against "before", as rows; every case's
figures in the rows' `extra`. Targets (issue 18): peak <= 6 GB with full sequences and less with
shared prefixes (checkpointing on), step time <= 1.1x before's. `--quick`: a 1024-token
micro-batch, for smoke runs (no targets judged).
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from atgrpo.bench.report import BenchRow

SUITE = "memory"
RECIPE = Path(__file__).resolve().parents[3] / "envs" / "planpath" / "train_smollm2.toml"
GB = 1e9
VARIANTS = {
    "before": {"train.logit_chunk_tokens": 0, "train.gradient_checkpointing": False},
    "after": {"train.logit_chunk_tokens": 1024, "train.gradient_checkpointing": True},
    "chunked only": {"train.logit_chunk_tokens": 1024, "train.gradient_checkpointing": False},
}
PLAIN_TARGET_GB = 6.0
TIME_TARGET = 1.1
"""After's step time at most this many times before's (issue 18)."""
CASE_TIMEOUT_S = 1200


def recipe_samples(cfg, tokenizer, budget: int) -> list:
    """Samples shaped like the recipe's step (see the module docstring): whole envs, in step order,
    while the plain layout's tokens (prompt + response per sample) stay within `budget`."""
    import numpy as np

    from atgrpo.engines.base import Completion, RolloutEngine
    from atgrpo.engines.factory import training_sampling
    from atgrpo.units import cut_units, roll_out_units, step_seeds
    from atgrpo.workflows.base import PolicyHandle
    from atgrpo.workflows.factory import make_workflow

    class RandomAnswers(RolloutEngine):
        """Answers every prompt with `max_new_tokens` random tokens from the upper half of the
        vocabulary (no model; never a special token, which tokenizers number first)."""

        def __init__(self, vocab: int) -> None:
            self.policy, self.version, self.vocab = "bench", 0, vocab
            self.rng = np.random.default_rng(0)

        def generate(self, prompts, params, seed=None):
            n = params.max_new_tokens
            return [
                Completion(self.rng.integers(self.vocab // 2, self.vocab, n).tolist(), [-2.0] * n, False)
                for _ in prompts
            ]

        def load_weights(self, version, tensors) -> None:
            pass

    ro = cfg.rollout
    workflow = make_workflow(cfg)
    policies = {p: PolicyHandle(RandomAnswers(len(tokenizer)), tokenizer) for p in cfg.policies}
    out: list = []
    tokens, step = 0, 0
    try:
        while True:
            units = cut_units(
                0,
                step,
                step_seeds(ro.envs_per_step, step),
                ro.envs_per_unit,
                split="train",
                versions={p: 0 for p in cfg.policies},
                greedy=False,
            )
            samples, _, _, _ = roll_out_units(
                workflow, policies, units, training_sampling(ro), run_id="bench", run_seed=cfg.run.seed
            )
            by_env: dict[int, list] = {}
            for s in samples:
                by_env.setdefault(s.key.env, []).append(s)
            for env_samples in by_env.values():
                cost = sum(len(s.prompt_ids) + len(s.response_ids) for s in env_samples)
                if tokens + cost > budget:
                    if not out:
                        raise ValueError(f"a budget of {budget} tokens holds no env's samples ({cost} tokens)")
                    return out
                out += env_samples
                tokens += cost
            step += 1
    finally:
        workflow.close()


def run_case(samples_path: Path, share_prefix: bool, settings: dict, budget: int) -> dict:
    """One learner step in this process (the `--case` child); returns its figures."""
    import numpy as np
    import torch

    from atgrpo.config import load_config
    from atgrpo.learner.backends import make_backend
    from atgrpo.learner.batching import build_microbatches
    from atgrpo.learner.trainer import loss_config
    from atgrpo.models.folder import load_model, load_tokenizer
    from atgrpo.models.importer import smollm2_folder

    torch.set_num_threads(os.cpu_count() or 1)
    overrides = [f"{k}={json.dumps(v)}" for k, v in settings.items()]
    overrides += [f"train.share_prefix={json.dumps(share_prefix)}", f"train.micro_batch_tokens={budget}"]
    cfg = load_config(RECIPE, overrides)
    (policy,) = cfg.policies.values()
    folder = smollm2_folder()
    backend = make_backend(
        load_model(folder, dtype=cfg.train.dtype, device=cfg.train.device),
        cfg.train,
        policy.lr,
        policy.weight_decay,
        loss_config(cfg),
    )
    samples = pickle.loads(samples_path.read_bytes())
    adv = np.random.default_rng(0).normal(size=len(samples))
    mbs = build_microbatches(
        samples,
        adv,
        max_tokens=budget,
        pad_id=load_tokenizer(folder).pad_token_id,
        aggregation=cfg.train.loss_aggregation,
        share_prefix=share_prefix,
    )
    before_step = _rss_now()
    start = time.perf_counter()
    metrics = backend.train_step(mbs, int(sum(len(s.response_ids) for s in samples)))
    seconds = time.perf_counter() - start
    assert np.isfinite(metrics["loss"])
    return {
        "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB,
        "rss_before_step_gb": before_step / GB,
        "step_s": seconds,
        "micro_batches": len(mbs),
        "positions": int(sum(mb.input_ids.numel() + (0 if mb.prefix is None else mb.prefix.ids.numel()) for mb in mbs)),
    }


def _rss_now() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _spawn(samples_path: Path, share_prefix: bool, variant: str, budget: int) -> dict:
    case = json.dumps(
        {"samples": str(samples_path), "share_prefix": share_prefix, "variant": variant, "budget": budget}
    )
    proc = subprocess.run(
        [sys.executable, "-m", "atgrpo.bench.memory", "--case", case],
        capture_output=True,
        text=True,
        timeout=CASE_TIMEOUT_S,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"memory case {variant}, share_prefix={share_prefix} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(quick: bool) -> list[BenchRow]:
    from atgrpo.config import load_config
    from atgrpo.models.folder import load_tokenizer
    from atgrpo.models.importer import smollm2_folder

    cfg = load_config(RECIPE)
    budget = 1024 if quick else cfg.train.micro_batch_tokens
    samples = recipe_samples(cfg, load_tokenizer(smollm2_folder()), budget)
    rows: list[BenchRow] = []
    plain_peak: float | None = None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "samples.pkl"
        path.write_bytes(pickle.dumps(samples))
        for share_prefix in (False, True):
            layout = "shared prefixes" if share_prefix else "full sequences"
            got = {}
            for v in VARIANTS:
                got[v] = _spawn(path, share_prefix, v, budget)
                print(f"memory: {layout}, {v}: {json.dumps(got[v])}", file=sys.stderr, flush=True)
            before = got["before"]
            extra = {"samples": float(len(samples)), "budget_tokens": float(budget)}
            for v, figures in got.items():
                extra.update({f"{v.replace(' ', '_')}_{k}": float(x) for k, x in figures.items()})
            for v in ("after", "chunked only"):
                what = "chunked + checkpointing" if v == "after" else "chunked (default)"
                peak = got[v]["peak_gb"]
                if v != "after":
                    target, met = "", None
                elif share_prefix:
                    target, met = "< the full-sequence peak", plain_peak is not None and peak < plain_peak
                else:
                    target, met = f"<= {PLAIN_TARGET_GB:g} GB", peak <= PLAIN_TARGET_GB
                    plain_peak = peak
                rows.append(
                    BenchRow(
                        SUITE,
                        f"step peak RSS, {layout}, {what}",
                        peak,
                        "GB",
                        "unchunked, no checkpointing",
                        before["peak_gb"],
                        higher_is_better=False,
                        target=target,
                        target_met=None if quick else met,
                        extra=extra,
                    )
                )
                rows.append(
                    BenchRow(
                        SUITE,
                        f"step time, {layout}, {what}",
                        got[v]["step_s"],
                        "s",
                        "unchunked, no checkpointing",
                        before["step_s"],
                        higher_is_better=False,
                        target=f"<= {TIME_TARGET:g}x reference",
                        target_met=None if quick else got[v]["step_s"] <= TIME_TARGET * before["step_s"],
                    )
                )
    return rows


def main(argv: list[str] | None = None) -> int:
    """`--case JSON`: run one case in this process and print its figures as one JSON line."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "--case":
        print("usage: python -m atgrpo.bench.memory --case JSON (atgrpo-bench memory runs it)", file=sys.stderr)
        return 2
    case = json.loads(args[1])
    figures = run_case(
        Path(case["samples"]), bool(case["share_prefix"]), VARIANTS[case["variant"]], int(case["budget"])
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
