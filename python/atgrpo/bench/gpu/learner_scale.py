"""`atgrpo-bench gpu`'s learner at scale: steps of a Qwen3-1.7B-shaped model (random weights) against
the GPU plan, and whether RL-sized updates (lr 1e-6) move the fp32 master weights under bf16.

Each case runs in its own process (`python -m atgrpo.bench.gpu.learner_scale BACKEND STAGE CKPT DEVICE`),
so its peak memory and DeepSpeed's process group are its own. A case is three optimizer steps of
two 8,192-token micro-batches (16 sequences of 256 prompt + 768 response tokens) with on-policy
behaviour log-probs and random advantages, bf16, 1,024-token logit chunks. On `cuda` it reports
`torch.cuda.max_memory_allocated` beside the plan's count (`launch.gpu_plan.learner_parts`); on the
CPU it runs a small shape on a few short sequences and reports no memory (CI keeps the code path
working that way).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import torch

from atgrpo.bench.report import BenchRow

SUITE = "gpu"
QWEN3_1_7B = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    tie_word_embeddings=True,
    max_position_embeddings=40960,
    rope_theta=1e6,
)
SMALL = {
    **QWEN3_1_7B,
    "vocab_size": 1000,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
CASES = [
    ("torch", 0, True),
    ("deepspeed", 0, True),
    ("deepspeed", 1, True),
    ("deepspeed", 2, True),
    ("deepspeed", 3, True),
    ("torch", 0, False),
]
"""(backend, ZeRO stage, gradient checkpointing): the cases run on a GPU (the CPU runs the first).
DeepSpeed's ZeRO-0 computes like the torch backend (fp32 weights under autocast), ZeRO 1-3 with
DeepSpeed's bf16 module, so the per-step log-prob movement separates the engine from the precision."""
PLAN_BAND = (0.95, 1.10)
"""The plan's count over the measured peak that the check accepts: never short by more than the
plan's headroom (`gpu_plan.HEADROOM`), and not so high that it refuses runs that fit."""
SEQS, PROMPT, RESPONSE, STEPS = 16, 256, 768, 3
SMALL_SEQS, SMALL_PROMPT, SMALL_RESPONSE = 4, 16, 48
PROBE = 65536
"""Leading elements of each parameter compared before and after (a copy of all would skew the peak)."""


def _batch(vocab: int, model, seqs: int, prompt: int, response: int):
    from atgrpo.engines.base import Completion
    from atgrpo.learner.batching import Sequences, pack
    from atgrpo.learner.logprob_check import learner_logprobs

    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, vocab, (prompt,), generator=g).tolist() for _ in range(seqs)]
    responses = [torch.randint(0, vocab, (response,), generator=g).tolist() for _ in range(seqs)]
    # On-policy: the model's own log-probs of its tokens, so the importance ratios start near 1.
    behaviour = learner_logprobs(model, prompts, [Completion(r, [], False) for r in responses], 1.0, pad_id=0)
    advantages = torch.randn(seqs, generator=g).numpy()
    return pack(
        Sequences(prompts, responses, behaviour, advantages),
        max_tokens=seqs // 2 * (prompt + response),
        pad_id=0,
        aggregation="token_mean",
        share_prefix=False,
    )


def _master(backend: str, param: torch.Tensor) -> torch.Tensor:
    """The fp32 master the optimizer updates (DeepSpeed's bf16 module holds only bf16(master))."""
    if backend == "deepspeed":
        from deepspeed.utils import safe_get_full_fp32_param

        full = safe_get_full_fp32_param(param)
        return param if full is None else full
    return param


def run_case(backend: str, stage: int, ckpt: bool, device: str, dtype: str = "bfloat16") -> dict:
    from transformers import AutoModelForCausalLM, Qwen3Config

    from atgrpo.config import load_config
    from atgrpo.launch.gpu_plan import ModelShape, learner_parts
    from atgrpo.learner.backends import make_backend
    from atgrpo.learner.loss import LossConfig

    cuda = device.startswith("cuda")
    shape = QWEN3_1_7B if cuda else SMALL
    seqs, prompt, response = (SEQS, PROMPT, RESPONSE) if cuda else (SMALL_SEQS, SMALL_PROMPT, SMALL_RESPONSE)
    cfg = load_config(
        None,
        [
            f"train.backend={backend!r}",
            f"train.zero_stage={stage}",
            f"train.dtype={dtype!r}",
            f"train.device={device!r}",
            f"train.gradient_checkpointing={str(ckpt).lower()}",
        ],
    )
    parts = learner_parts(ModelShape.from_hf_config(shape), cfg, ranks=1)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(Qwen3Config(**shape), dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    before = {k: p.detach().flatten()[:PROBE].clone() for k, p in model.named_parameters()}
    mbs = _batch(shape["vocab_size"], model, seqs, prompt, response)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    learner = make_backend(model, cfg.train, 1e-6, 0.0, LossConfig(temperature=1.0))
    times, per_step = [], []
    for _ in range(STEPS):
        start = time.perf_counter()
        metrics = learner.train_step(mbs, sum(mb.num_tokens for mb in mbs))
        sync()
        times.append(time.perf_counter() - start)
        per_step.append(metrics)
    peak = torch.cuda.max_memory_allocated() / 1e9 if cuda else float("nan")
    live = {k.removeprefix("module."): _master(backend, p) for k, p in learner.model.named_parameters()}
    moved = [
        (live[k].detach().flatten()[:PROBE].float() != v).float().mean().item() for k, v in before.items() if k in live
    ]
    if len(moved) != len(before) or min(moved) < 0.5:
        raise RuntimeError(
            f"{backend} ZeRO-{stage}: the fp32 master did not move at lr 1e-6 "
            f"(least-moved share {min(moved, default=0):.3f} over {len(moved)}/{len(before)} tensors)"
        )
    tokens = seqs * (prompt + response)
    return {
        "backend": backend,
        "zero_stage": stage,
        "checkpointing": ckpt,
        "params": params,
        "peak_gb": peak,
        "plan_gb": sum(parts.values()) / 1e9,
        "plan_parts_gb": {k: v / 1e9 for k, v in parts.items()},
        "step_s": times,
        "tokens_per_s": tokens / times[-1],
        "moved_share_min": min(moved),
        "loss": metrics["loss"],
        "grad_norm": metrics["grad_norm"],
        "dtype": dtype,
        # Each step's mean |learner - behaviour| log-prob before its update: step 1 is the gap
        # between the backend's forward and the fp32 forward that scored the batch, later steps
        # add what the updates moved.
        "logprob_gap_per_step": [m["logprob_mismatch"] for m in per_step],
        "clip_frac_per_step": [m["clip_frac"] for m in per_step],
    }


def rows(device: str) -> list[BenchRow]:
    """One row per case: the peak against the plan (on a GPU), and the step's tokens/s."""
    out = []
    for backend, stage, ckpt in CASES if device.startswith("cuda") else CASES[:1]:
        cmd = [sys.executable, "-m", "atgrpo.bench.gpu.learner_scale", backend, str(stage), str(int(ckpt)), device]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(
                f"learner at scale ({' '.join(cmd[3:])}) failed (exit {done.returncode}):\n{done.stderr[-3000:]}"
            )
        case = json.loads(done.stdout.strip().splitlines()[-1])
        extra = {k: float(v) for k, v in case.items() if isinstance(v, (int, float))}
        extra.update({f"plan {k} GB": v for k, v in case["plan_parts_gb"].items()}, step_s_first=case["step_s"][0])
        for i, (gap, clip) in enumerate(zip(case["logprob_gap_per_step"], case["clip_frac_per_step"]), 1):
            extra.update({f"logprob_gap_step{i}": gap, f"clip_frac_step{i}": clip})
        label = (
            f"{backend}{f' ZeRO-{stage}' if backend == 'deepspeed' else ''}, checkpointing {'on' if ckpt else 'off'}"
        )
        if device.startswith("cuda"):
            lo, hi = PLAN_BAND
            out.append(
                BenchRow(
                    SUITE,
                    f"1.7B-shape step peak GB vs plan ({label})",
                    case["peak_gb"],
                    "GB",
                    "plan",
                    case["plan_gb"],
                    higher_is_better=False,
                    target=f"plan/peak in [{lo}, {hi}]",
                    target_met=lo <= case["plan_gb"] / case["peak_gb"] <= hi,
                    extra=extra,
                )
            )
        out.append(
            BenchRow(
                SUITE,
                f"learner step at scale ({label}, {device})",
                case["tokens_per_s"],
                "tok/s",
                "",
                float("nan"),
                extra=extra,
            )
        )
    return out


if __name__ == "__main__":
    backend, stage, ckpt, device = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
    print(json.dumps(run_case(backend, stage, ckpt, device, *sys.argv[5:6])))
