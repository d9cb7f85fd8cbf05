"""The GPU placement plan of a run: which process sits on which GPU, and whether their memory fits.

`atgrpo-train` checks the plan before it starts anything, so a run that would run out of memory,
or whose vLLM engine would refuse to start, is refused with the numbers instead. What it counts:

- **Learner** (per rank): weights, gradients and optimizer state, from the parameter count, the
  dtype and the backend (`learner_parts`: the torch backend replicates fp32 master weights, fp32
  gradients and AdamW's two fp32 moments, plus autocast's bf16 copy of the weights in bf16;
  DeepSpeed ZeRO-s in bf16 holds bf16 weights, an fp32 gradient buffer and fp32 master + moments,
  partitioned across ranks as its stages do), the frozen KL reference if `train.kl_coef`, and what
  a step adds while it runs: the larger of its pass (activations of one micro-batch of
  `train.micro_batch_tokens` tokens, autocast's copy, one chunk's logits) and AdamW's temporary in
  the update, plus DeepSpeed's buckets. Policies step in turn, so only the largest step is added.
- **LoRA policies** (`learner.lora`): one fp32 frozen base per group of policies on one base
  (plus autocast's bf16 copy of it under bf16), and per policy only its adapter's weights,
  gradients and AdamW moments (fp32 at every ZeRO stage, `deepspeed_config`) and its activations.
  Their KL reference is the base with the adapters off (nothing), or for a warm-started adapter a
  frozen fp32 copy of it (`learner.lora.AdapterReference`: the adapter's size).
- **vLLM engines**: `rollout.vllm_gpu_memory_utilization` x the GPU's memory per actor. vLLM
  reserves that much at start and refuses to start unless it is free then, so it counts in full.
- **torch engines**: their weights in the rollout dtype and the KV cache of one generate call.
- **A CUDA context** per process per GPU (`CONTEXT_BYTES`).

Colocated (an actor on a learner GPU): with `rollout.vllm_sleep_when_idle` the engine frees its
memory while the learner trains, so the GPU must hold max(engine + learner at rest, learner at its
peak); without it, both at their peak. A colocated actor needs the alternating schedule
(`train.max_staleness = 0`, `train.streaming = false`): otherwise both would compute at once.

The activation figure is an estimate (per token and layer, about 8 x hidden + 4 x intermediate
values kept for backward; with gradient checkpointing only each layer's input, plus one layer's
worth). The learner's counts were checked against the peaks of a Qwen3-1.7B-shaped step on two
H200s and an H100 (torch backend and ZeRO 1-3, with and without checkpointing: the plan is 1.4%
below to 5.0% above each, `tests/test_gpu_placement.py`); the engines' counts were not.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from atgrpo.config import RunConfig
from atgrpo.config.lora import lora_bases, warm_starts_adapter
from atgrpo.errors import PlacementError
from atgrpo.placement import actor_gpus as _actor_gpus
from atgrpo.placement import colocated
from atgrpo.placement import learner_gpus as _learner_gpus

GB = 1e9
CONTEXT_BYTES = int(1.0 * GB)
"""CUDA context and library workspaces of one process on one GPU (measured values run 0.5-1 GB)."""
HEADROOM = 0.95
"""Share of a GPU's memory the plan fills at most (fragmentation, NCCL buffers)."""
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
LOGIT_BYTES = 16
"""Bytes per (token, vocabulary entry) of the loss's logits while one chunk is live: the product in
the compute dtype, its fp32 copy, the log-softmax and their gradients. Measured on an H200 (Qwen3-1.7B
shape, 1024-token chunks, bf16): the torch backend's peak was 2.7 GB above the parts without it."""
TRANSIENT = ("gradients", "working", "buckets")
"""`learner_parts` a learner frees between steps."""


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs of one policy's model."""

    params: int
    hidden: int
    layers: int
    intermediate: int
    vocab: int
    kv_dim: int
    """key/value heads x head dim."""
    q_dim: int = 0
    """query heads x head dim (0: `hidden`, as in most dense models)."""

    def linear_dims(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each decoder linear layer, by the name peft's targets match."""
        h, i, q, kv = self.hidden, self.intermediate, self.q_dim or self.hidden, self.kv_dim
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def adapter_params(self, r: int, targets: list[str]) -> int:
        """Parameters of a rank-`r` LoRA adapter on `targets` (A: r x in, B: out x r, every layer). A
        name this shape does not know is counted as the largest linear layer, so the plan errs high."""
        dims = self.linear_dims()
        widest = max(dims.values(), key=sum)
        return self.layers * sum(r * sum(dims.get(t, widest)) for t in targets)

    @classmethod
    def from_hf_config(cls, c: dict) -> ModelShape:
        """From a model's `config.json` (dense decoder LMs: Qwen3, Llama, Mistral, SmolLM)."""
        h, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
        heads = c["num_attention_heads"]
        kv_heads = c.get("num_key_value_heads") or heads
        head_dim = c.get("head_dim") or h // heads
        attn = h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
        per_layer = attn + 3 * h * inter + 2 * h
        embed = vocab * h * (1 if c.get("tie_word_embeddings", False) else 2)
        return cls(layers * per_layer + embed + h, h, layers, inter, vocab, kv_heads * head_dim, heads * head_dim)


@dataclass
class GpuLoad:
    """What the plan puts on one GPU: (what, bytes) while the learner trains and while it rests."""

    gpu: int
    total: int
    peak: list[tuple[str, int]] = field(default_factory=list)
    rest: list[tuple[str, int]] = field(default_factory=list)

    def need(self) -> int:
        return max(sum(b for _, b in self.peak), sum(b for _, b in self.rest))

    def describe(self) -> str:
        def row(items: list[tuple[str, int]]) -> str:
            return " + ".join(f"{w} {b / GB:.1f}" for w, b in items) + f" = {sum(b for _, b in items) / GB:.1f} GB"

        text = f"GPU {self.gpu} ({self.total / GB:.1f} GB, {HEADROOM:.0%} usable): " + row(self.peak)
        if self.rest != self.peak:
            text += f"; while the learner rests: {row(self.rest)}"
        return text


def learner_parts(shape: ModelShape, cfg: RunConfig, ranks: int, policy: str | None = None) -> dict[str, int]:
    """Bytes one learner rank holds for one policy, by part. A LoRA `policy`'s parts are its
    adapter's and its activations; its group's base is `lora_base_bytes`."""
    tr = cfg.train
    n = shape.params
    autocast = 0
    lora = cfg.policies[policy].lora if policy is not None else None
    if lora is not None:
        # fp32 adapter, gradients and AdamW moments at every stage; ZeRO 1-2 split the moments and
        # (2) the gradients.
        a = shape.adapter_params(lora.r, lora.target_modules)
        weights, grads, optim = 4 * a, 4 * a, 8 * a
        if tr.backend == "deepspeed":
            optim //= ranks if tr.zero_stage >= 1 else 1
            grads //= ranks if tr.zero_stage >= 2 else 1
    elif tr.backend == "deepspeed" and tr.dtype == "bfloat16" and tr.zero_stage >= 1:
        # bf16 weights for compute, fp32 gradient accumulation (a full buffer on every rank below
        # ZeRO-2: BF16_Optimizer's), fp32 master + two moments (ZeRO's split).
        weights, grads, optim = 2 * n, 4 * n, 12 * n
        stage = tr.zero_stage
        optim //= ranks if stage >= 1 else 1
        grads //= ranks if stage >= 2 else 1
        weights //= ranks if stage >= 3 else 1
    else:
        # fp32 master weights (bf16 only in compute, under autocast, which keeps a bf16 copy of the
        # weights it casts for the pass), fp32 gradients, AdamW's two fp32 moments.
        weights, grads, optim = 4 * n, 4 * n, 8 * n
        autocast = 2 * n if tr.dtype == "bfloat16" else 0
        if tr.backend == "deepspeed":
            optim //= ranks if tr.zero_stage >= 1 else 1
            grads //= ranks if tr.zero_stage >= 2 else 1
            weights //= ranks if tr.zero_stage >= 3 else 1
    compute = _DTYPE_BYTES[tr.dtype]
    module_bf16 = lora is None and tr.backend == "deepspeed" and tr.dtype == "bfloat16" and tr.zero_stage >= 1
    # Saved activations: DeepSpeed's bf16 module keeps bf16 ones; under autocast the residual stream
    # and the norms stay fp32 beside bf16 matmul inputs: 3.3 bytes a value on an H100 and an H200
    # (the Qwen3-1.7B shape without checkpointing), counted as 3.5. Counting 4 put the plan 10% over
    # that peak, refusing runs that fit. In fp32 every value is 4 bytes.
    act_bytes = 2 if module_bf16 else 3.5 if tr.dtype == "bfloat16" else 4
    tokens = tr.micro_batch_tokens
    per_layer = 8 * shape.hidden + 4 * shape.intermediate
    if tr.gradient_checkpointing:
        acts = int(tokens * act_bytes * (shape.layers * shape.hidden + per_layer))
    else:
        acts = int(tokens * act_bytes * shape.layers * per_layer)
    # One chunk's logits (`train.logit_chunk_tokens`), or every token's when unchunked (0).
    logit_tokens = min(tr.logit_chunk_tokens, tokens) if tr.logit_chunk_tokens else tokens
    forward_backward = acts + autocast + logit_tokens * shape.vocab * LOGIT_BYTES
    # AdamW's update (torch's foreach path) takes an fp32 temporary of the second moment it steps:
    # a third of the fp32 master + moments, half of the moments alone. It comes after the pass.
    update = optim // 3 if module_bf16 else optim // 2
    parts = {"weights": weights, "gradients": grads, "optimizer": optim, "working": max(forward_backward, update)}
    trained = n if lora is None else a
    if module_bf16 and tr.zero_stage == 1:
        parts["bf16 gradients"] = 2 * trained  # BF16_Optimizer zeroes them after a step, never frees them
    if tr.backend == "deepspeed" and tr.zero_stage >= 2:
        # Imported here: the learner's backends bring torch, which a CPU run's launcher never needs.
        from atgrpo.learner.backends.deepspeed_config import bucket_elements

        # ZeRO 2-3 stage gradients through a reduce bucket (fp32 counted); ZeRO-3 also holds the
        # parameters it gathers (DeepSpeed's default stage3_max_live_parameters, 1e9, in bf16).
        parts["buckets"] = 4 * bucket_elements(trained) + (2 * min(10**9, trained) if tr.zero_stage == 3 else 0)
    if tr.kl_coef and lora is None:
        parts["kl_reference"] = compute * n
    elif tr.kl_coef and policy is not None and warm_starts_adapter(cfg, policy):
        parts["kl_reference"] = 4 * a  # the warm-started adapter's frozen fp32 copy; no copy of the base
    return parts


def lora_base_bytes(shape: ModelShape, cfg: RunConfig) -> tuple[int, int]:
    """(at the learner's peak, at rest) bytes of one LoRA group's frozen base on a learner rank:
    fp32 on every rank (no ZeRO stage partitions it: `learner.backends.adapter_module`), and during
    a bf16 pass autocast's bf16 copy of it."""
    n = shape.params
    return 4 * n + (2 * n if cfg.train.dtype == "bfloat16" else 0), 4 * n


def torch_engine_bytes(shape: ModelShape, cfg: RunConfig) -> int:
    """Weights in the rollout dtype and the KV cache of one generate call of a unit."""
    from atgrpo.engines.factory import rollout_dtype

    ro = cfg.rollout
    size = _DTYPE_BYTES[rollout_dtype(cfg)]
    seqs = ro.envs_per_unit * ro.k
    kv = seqs * (ro.max_prompt_tokens + ro.max_new_tokens) * shape.layers * 2 * shape.kv_dim * size
    return shape.params * size + kv


def plan(cfg: RunConfig, shapes: dict[str, ModelShape], gpu_bytes: int) -> list[GpuLoad]:
    """Every GPU's load; raises `PlacementError` naming the numbers when one does not fit or the
    schedule cannot share a GPU."""
    on_gpu_learner = cfg.train.device.startswith("cuda")
    on_gpu_actors = cfg.rollout.device.startswith("cuda")
    if colocated(cfg) and (cfg.train.max_staleness > 0 or cfg.train.streaming):
        raise PlacementError(
            "an actor shares a GPU with the learner (colocated), which needs the alternating schedule: "
            "set train.streaming = false and train.max_staleness = 0, or give the actors their own GPUs "
            "(launch.actor_devices)"
        )
    loads: dict[int, GpuLoad] = {}

    def load(gpu: int) -> GpuLoad:
        return loads.setdefault(gpu, GpuLoad(gpu, gpu_bytes))

    if on_gpu_learner:
        gpus = _learner_gpus(cfg)
        for g in gpus:
            ld = load(g)
            ld.peak.append(("learner context", CONTEXT_BYTES))
            ld.rest.append(("learner context", CONTEXT_BYTES))
            for group in lora_bases(cfg):
                peak, rest = lora_base_bytes(shapes[group[0]], cfg)
                ld.peak.append((f"learner base of {'+'.join(group)}", peak))
                ld.rest.append((f"learner base of {'+'.join(group)}", rest))
            # Policies step one after another: each keeps its weights and optimizer state, and the
            # one with the largest step adds its gradients, activations and buckets at the peak.
            stepping: dict[str, int] = {}
            for p, shape in sorted(shapes.items()):
                parts = learner_parts(shape, cfg, len(gpus), p)
                kept = (f"learner {p} at rest", sum(v for k, v in parts.items() if k not in TRANSIENT))
                ld.peak.append(kept)
                ld.rest.append(kept)
                stepping[p] = sum(v for k, v in parts.items() if k in TRANSIENT)
            if stepping:
                busiest = max(stepping, key=lambda p: stepping[p])
                ld.peak.append((f"learner {busiest} step", stepping[busiest]))
    if on_gpu_actors:
        sleeps = cfg.rollout.engine == "vllm" and cfg.rollout.vllm_sleep_when_idle
        for i, g in enumerate(_actor_gpus(cfg)):
            ld = load(g)
            if cfg.rollout.engine == "vllm":
                engine = int(cfg.rollout.vllm_gpu_memory_utilization * gpu_bytes)
            else:
                engine = sum(torch_engine_bytes(s, cfg) for s in shapes.values())
            ld.rest.append((f"actor{i}", CONTEXT_BYTES + engine))
            ld.peak.append((f"actor{i}", CONTEXT_BYTES + (0 if sleeps else engine)))
    over = [ld for ld in loads.values() if ld.need() > HEADROOM * ld.total]
    if over:
        raise PlacementError(
            "the GPU plan does not fit: "
            + "; ".join(ld.describe() for ld in over)
            + ". Lower rollout.vllm_gpu_memory_utilization or train.micro_batch_tokens, set "
            "train.gradient_checkpointing, use DeepSpeed ZeRO over more learner GPUs, or give the actors "
            "their own GPUs (launch.actor_devices)"
        )
    return sorted(loads.values(), key=lambda ld: ld.gpu)


def model_shapes(cfg: RunConfig) -> dict[str, ModelShape]:
    """Each policy's shape from its model folder's config.json, or from the tiny spec."""
    from atgrpo.paths import source_model_dir

    out = {}
    for p, pc in cfg.policies.items():
        source = source_model_dir(cfg, p)
        if source is not None:
            out[p] = ModelShape.from_hf_config(json.loads((Path(source) / "config.json").read_text()))
        else:
            t = pc.tiny
            out[p] = ModelShape.from_hf_config(
                {
                    "hidden_size": t.hidden_size,
                    "num_hidden_layers": t.num_layers,
                    "intermediate_size": t.intermediate_size,
                    "vocab_size": 128,
                    "num_attention_heads": t.num_heads,
                    "num_key_value_heads": t.num_kv_heads,
                    "tie_word_embeddings": True,
                }
            )
    return out


def gpu_memory_bytes(cfg: RunConfig) -> int:
    """One GPU's memory: `launch.gpu_memory_gb`, else what CUDA reports for the first visible GPU."""
    if cfg.launch.gpu_memory_gb is not None:
        return int(cfg.launch.gpu_memory_gb * GB)
    import torch

    if not torch.cuda.is_available():
        raise PlacementError(
            "the config places processes on cuda, but this host sees no GPU "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}); set launch.gpu_memory_gb to plan anyway"
        )
    return int(torch.cuda.get_device_properties(0).total_memory)


def check_plan(cfg: RunConfig) -> list[GpuLoad]:
    """The plan of `cfg` (empty when nothing runs on a GPU); raises `PlacementError` when it does not fit."""
    if not (cfg.train.device.startswith("cuda") or cfg.rollout.device.startswith("cuda")):
        return []
    return plan(cfg, model_shapes(cfg), gpu_memory_bytes(cfg))


__all__ = ["GpuLoad", "ModelShape", "check_plan", "colocated", "learner_parts", "model_shapes", "plan"]
