"""The DeepSpeed config of `DeepSpeedBackend`: batch keys, ZeRO settings and the precision plan.

Precision plan (DeepSpeed 0.19.8, `runtime/engine.py` `_do_optimizer_sanity_check`, read against
its source; the bf16 paths are tested on the CPU accelerator, and ran on an H100, docs/gpus.md):

* fp32 compute: no `bf16` section; the client AdamW steps fp32 parameters (ZeRO 1-3 wrap it on
  fp32 partitions).
* bf16 compute, ZeRO 1-3 (`Precision.module_bf16`): `bf16.enabled` with
  `data_types.grad_accum_dtype = "fp32"`. DeepSpeed casts the module to bf16 and keeps fp32 master
  partitions; each micro-batch's bf16 gradient is added to an fp32 buffer (ZeRO-1: `BF16_Optimizer`,
  which DeepSpeed picks for stage 1 + bf16 + fp32 accumulation; ZeRO-2: the fp32 "compact" gradient
  partition of `DeepSpeedZeroOptimizer`; ZeRO-3: its fp32 gradient partitions). Gradients cross
  ranks in fp32 (`communication_data_type`): ZeRO-1 reduces the accumulated fp32 buffer once per
  step, which a bf16 reduction would round. DeepSpeed clips the fp32 gradients it is about to apply.
* bf16 compute, ZeRO-0 (`Precision.autocast_bf16`): DeepSpeed has no stage-0 path with bf16
  parameters and fp32 accumulation (it raises NotImplementedError for that mix; with bf16
  accumulation it picks `FP16_UnfusedOptimizer`, which sums micro-batches in bf16). So stage 0
  keeps fp32 parameters (no `bf16` section) and the backend runs the forward under
  `torch.autocast(bf16)`, as `TorchBackend` does: the parameters are the masters, the gradients fp32.
  Without ZeRO that is also the smaller layout (no separate bf16 copy).
* LoRA policies (`lora=True`): fp32 parameters always, and under bf16 compute `Precision.autocast_bf16`
  at every stage, never DeepSpeed's bf16 module. A LoRA engine's module is `AdapterModule`, whose
  only parameters are the adapter's (`adapter_module`): DeepSpeed's bf16 mode would cast those to
  bf16 and leave the frozen base, which does nearly all the arithmetic, in fp32, so the matmuls
  would not run in bf16 at all (and the adapter's low-rank path would be rounded to bf16 for
  nothing). Autocast computes the base's and the adapter's matmuls alike in bf16, with the fp32
  adapter as the master and fp32 gradients, as `TorchBackend` does.
"""

from __future__ import annotations

import enum
from typing import Any

import torch

DEFAULT_BUCKET = 500_000_000


class Precision(enum.Enum):
    fp32 = "fp32"
    """fp32 parameters, fp32 compute."""
    module_bf16 = "module_bf16"
    """DeepSpeed's bf16 mode: bf16 module, fp32 masters and gradient accumulation (ZeRO 1-3)."""
    autocast_bf16 = "autocast_bf16"
    """fp32 parameters (the masters) computed under torch.autocast(bf16) (ZeRO-0; LoRA at every stage)."""


def precision_plan(compute: torch.dtype, zero_stage: int, lora: bool = False) -> Precision:
    """The plan of a policy computing in `compute` under `zero_stage`; `lora`: a LoRA policy's
    engine (its module holds the adapter only: autocast at every stage, see above)."""
    if compute == torch.float32:
        return Precision.fp32
    if compute != torch.bfloat16:
        raise ValueError(f"DeepSpeed backend computes in float32 or bfloat16, got {compute}")
    return Precision.module_bf16 if zero_stage > 0 and not lora else Precision.autocast_bf16


def bucket_elements(n_params: int) -> int:
    """Elements of each ZeRO bucket for a model of `n_params` trainable parameters: no larger than
    the model, since DeepSpeed preallocates them (2 GB each in fp32 at the default)."""
    return int(min(DEFAULT_BUCKET, max(n_params, 1_000_000)))


def build_config(
    *, world_size: int, zero_stage: int, grad_clip: float, n_params: int, precision: Precision
) -> dict[str, Any]:
    """The engine config (before the caller's `extra_config` is merged in)."""
    bucket = bucket_elements(n_params)
    bf16 = precision is Precision.module_bf16
    config: dict[str, Any] = {
        # Batch keys only feed DeepSpeed's sample counters here: one "sample" per micro-batch,
        # GAS 1, and the accumulation boundary is ours (managed_gradient_accumulation false).
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": world_size,
        "managed_gradient_accumulation": False,
        # Without ZeRO the backend clips in its pre-step hook (DeepSpeed would discard the norm).
        "gradient_clipping": grad_clip if zero_stage > 0 else 0.0,
        "zero_optimization": {
            "stage": zero_stage,
            # Unmanaged accumulation allows overlap_comm only with ZeRO-2; it buys nothing on CPU.
            "overlap_comm": False,
            "reduce_bucket_size": bucket,
            "allgather_bucket_size": bucket,
            "stage3_prefetch_bucket_size": bucket,
        },
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "fp16": {"enabled": False},
        "bf16": {"enabled": bf16},
        "steps_per_print": 2**62,
        "wall_clock_breakdown": False,
    }
    if bf16:
        config["data_types"] = {"grad_accum_dtype": "fp32"}
        config["communication_data_type"] = "fp32"
    return config


__all__ = ["DEFAULT_BUCKET", "Precision", "bucket_elements", "build_config", "precision_plan"]
