"""The learner backend contract: one policy's model and optimizer, trained one AT-GRPO step at a time.

A backend owns its model and optimizer; nothing else touches them. A step is built in two calls:
`accumulate` runs forward and backward over micro-batches as they become available (any number of
calls), and `finish_step` takes exactly one optimizer update. The loss is divided by the step's
token total (`total_tokens`), which a streaming learner knows only when the step's last group is
in; so `accumulate` back-propagates UNNORMALISED sums and `finish_step` scales the accumulated
gradient by 1 / total_tokens once, right before clipping and the update. Scaling is linear, so the
update equals the one of a loss divided up front, up to float rounding. `train_step` is the two in
one call (the batch path).

In a multi-rank job every rank calls both, in the same order, with its own share of micro-batches
and the same `total_tokens` (the step's loss normalizer over all ranks); gradients are summed across
ranks by the backend, so every rank ends the step with identical weights.

Metrics returned by `finish_step` are the step's, flat: `loss`, `clip_frac`, `logprob_mismatch`,
`is_weight` (each a `LossOutputs` sum over `total_tokens`), `grad_norm` (of the normalised gradient,
before clipping) and `tokens` (`total_tokens`).

Precision (`train.dtype`, the compute dtype): every backend keeps fp32 master weights and fp32
optimizer state, accumulates gradients in fp32 and clips the fp32 gradient the update applies,
whatever the compute dtype. "bfloat16" runs the forward and backward in bf16 (mixed precision); an
update far below bf16's resolution (lr 1e-6 on weights ~0.03, whose bf16 spacing is ~1e-4) still
moves the fp32 master. Models are handed over in fp32 (`Trainer` loads them so).
`export_weights` returns the weights the compute uses: the fp32 master rounded to the compute
dtype (bf16 under "bfloat16", the master itself under "float32"). Rollout engines cast them to
`rollout.dtype` as they copy them in, so the learner and the actors may differ in dtype.

Device: `accumulate` moves each micro-batch to the model's device (`MicroBatch.to`), the one place
that does, so packers and wire decoders may hand over CPU tensors to a model on a GPU.
"""

from __future__ import annotations

import abc
import contextlib
import copy
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from atgrpo.learner.host_staging import HostStager
from atgrpo.learner.logprobs import loss_inputs, response_logprobs
from atgrpo.learner.lora import AdapterReference, AdapterWeights, BaseReference
from atgrpo.learner.loss import LossConfig, ppo_clip_loss
from atgrpo.learner.microbatch import MicroBatch
from atgrpo.models.tied import without_aliases


class LearnerBackend(abc.ABC):
    model: torch.nn.Module
    _sums: dict[str, float]
    """Metric numerators of the step being accumulated."""

    @abc.abstractmethod
    def accumulate(self, micro_batches: list[MicroBatch], proximal: list[torch.Tensor] | None = None) -> None:
        """Forward and backward (loss not normalised) over `micro_batches`, added to the step's
        gradient; `proximal`: the proximal policy's log-probs of each (`score`), or None."""

    @abc.abstractmethod
    def score(self, micro_batches: list[MicroBatch]) -> list[torch.Tensor]:
        """The current policy's log-probs of each micro-batch's response tokens, [B, L-1] each on
        the model's device, without a gradient (`logprobs.response_logprobs`): the proximal
        policy's, taken before a step's first update (`learner.proximal`). Every rank calls it."""

    @abc.abstractmethod
    def finish_step(self, total_tokens: int) -> dict[str, float]:
        """Scale the accumulated gradient by 1 / `total_tokens`, clip it and take one optimizer
        update; returns the step's metrics (see the module docstring) and starts the next step."""

    lr_optimizer: torch.optim.Optimizer
    """The torch optimizer whose param groups' `lr` the next update uses (under DeepSpeed, the client
    optimizer ZeRO wraps: its groups stay the ones stepped, whatever the wrapper)."""

    def set_lr(self, lr: float) -> None:
        """The lr of the next optimizer updates (the trainer's schedule, `learner.lr_schedule`)."""
        for group in self.lr_optimizer.param_groups:
            group["lr"] = lr

    def train_step(
        self, micro_batches: list[MicroBatch], total_tokens: int, proximal: list[torch.Tensor] | None = None
    ) -> dict[str, float]:
        """One whole optimizer step over `micro_batches` (the batch path)."""
        self.accumulate(micro_batches, proximal)
        return self.finish_step(total_tokens)

    @abc.abstractmethod
    def export_weights(self, to_host: bool = True) -> dict[str, torch.Tensor]:
        """What the policy publishes (`published_state`) as contiguous CPU tensors by HF parameter
        name (gathered under ZeRO-3), copied by `host_copy`. `to_host` False: take part in the
        gather a collective export is (ZeRO-3), copy nothing, return {}: a rank that neither
        publishes nor saves a model folder."""

    adapter: AdapterWeights | None = None
    """A LoRA policy's adapter on its group's shared model (`learner.lora`); None: a full policy."""

    def weight_state(self) -> dict[str, torch.Tensor]:
        """What this policy publishes and saves, live (no copy): the model's state dict, or a LoRA
        policy's adapter tensors only (`learner.lora`)."""
        return self.adapter.state_dict() if self.adapter is not None else self.model.state_dict()

    def published_state(self) -> dict[str, torch.Tensor]:
        """`weight_state` as it is published and exported: each tied tensor once, under its first
        name (`models.tied`). A LoRA adapter's tensors are never tied."""
        state = self.weight_state()
        return state if self.adapter is not None else without_aliases(self.model, state)

    @property
    def adapter_policy(self) -> str | None:
        """The policy whose adapter this backend trains (what its checkpoints are checked against); None: a full model."""
        return self.adapter.policy if self.adapter is not None else None

    @property
    def export_is_collective(self) -> bool:
        """Whether `export_weights` is a collective every rank must call (ZeRO-3 gathers the
        shards); False: only the rank that publishes calls it."""
        return False

    _host_stager: HostStager | None = None

    def host_copy(
        self, tensors: Mapping[str, torch.Tensor], float_dtype: torch.dtype | None
    ) -> dict[str, torch.Tensor]:
        """Contiguous CPU copies of `tensors`, floating ones in `float_dtype`: through reused pinned
        buffers where they lie on a GPU (`learner.host_staging`), a plain copy otherwise."""
        if self._host_stager is None:
            self._host_stager = HostStager()
        return self._host_stager.to_host(tensors, float_dtype)

    @abc.abstractmethod
    def save_checkpoint(self, folder: Path) -> None:
        """Model and optimizer state, enough for an exact resume. Every rank calls it."""

    @abc.abstractmethod
    def load_checkpoint(self, folder: Path) -> None: ...

    def _take_sums(self) -> dict[str, float]:
        sums, self._sums = self._sums, {}
        return sums


COMPUTE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""`train.dtype` -> compute dtype. No float16: it would need loss scaling, which no backend does."""


def compute_dtype(name: str) -> torch.dtype:
    """The compute dtype a `train.dtype` value names; ValueError for any other."""
    if name not in COMPUTE_DTYPES:
        raise ValueError(f"learner compute dtype must be one of {sorted(COMPUTE_DTYPES)}, got {name!r}")
    return COMPUTE_DTYPES[name]


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """Mixed-precision compute of fp32 parameters in `dtype` (torch.autocast: matmuls in bf16,
    reductions and softmax in fp32; the gradients land in the parameters' fp32). Nothing for None
    or fp32: the model computes in its own dtype."""
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def as_fp32_master(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with fp32 parameters: the master weights. A lower-precision model is cast up (exact:
    bf16 and fp16 values are fp32 values), at the cost of a transient second copy; load in fp32 instead."""
    if any(p.is_floating_point() and p.dtype != torch.float32 for p in model.parameters()):
        model.to(torch.float32)
    return model


def kl_reference(model: torch.nn.Module, adapter: AdapterWeights | None, dtype: torch.dtype):
    """The KL reference of a policy, its initial policy frozen, for both backends: a full policy's
    is a deep copy of `model` (its initial weights), forward only, in the compute `dtype`; a LoRA
    policy's is its shared base with the adapters off (`learner.lora.BaseReference`), no copy, or,
    for a warm-started adapter, a frozen copy of that adapter on the shared base
    (`learner.lora.AdapterReference`). Call it before anything (DeepSpeed included) has touched `model`."""
    if adapter is not None:
        return AdapterReference(adapter) if adapter.warm_started else BaseReference(adapter.model)
    return copy.deepcopy(model).eval().requires_grad_(False).to(dtype)


def accumulate(
    model: torch.nn.Module,
    micro_batches: list[MicroBatch],
    loss_cfg: LossConfig,
    backward: Callable[[torch.Tensor], None],
    sums: dict[str, float],
    ref_model: torch.nn.Module | None = None,
    *,
    device: torch.device,
    autocast_dtype: torch.dtype | None = None,
    proximal: Sequence[torch.Tensor | None] | None = None,
) -> None:
    """Forward, unnormalised loss and `backward(loss)` for every micro-batch; adds the metric
    numerators to `sums`. Each micro-batch is first moved to `device` (the model's). The forward
    runs under `autocast(device, autocast_dtype)`, backward outside it, as torch.autocast asks.
    `proximal[i]`: the proximal log-probs of micro-batch i (None: the learner is its proximal policy)."""
    for i, mb in enumerate(micro_batches):
        mb = mb.to(device)
        prox = proximal[i] if proximal is not None and i < len(proximal) else None
        with autocast(device, autocast_dtype):
            inputs = loss_inputs(model, mb, loss_cfg, ref_model, prox)
        out = ppo_clip_loss(inputs, loss_cfg, 1)
        backward(out.loss)
        for k, v in out.sums().items():
            sums[k] = sums.get(k, 0.0) + v


def score_micro_batches(
    model: torch.nn.Module,
    micro_batches: list[MicroBatch],
    temperature: float,
    *,
    device: torch.device,
    autocast_dtype: torch.dtype | None = None,
) -> list[torch.Tensor]:
    """`LearnerBackend.score` for both backends: the forward of `accumulate`, without a gradient."""
    out = []
    with torch.no_grad():
        for mb in micro_batches:
            mb = mb.to(device)
            with autocast(device, autocast_dtype):
                out.append(response_logprobs(model, mb, temperature))
    return out


def finish_metrics(sums: dict[str, float], total_tokens: int, grad_norm: float) -> dict[str, float]:
    """Metric sums divided by `total_tokens`, named without `_sum`, plus `grad_norm` and `tokens`."""
    n = max(total_tokens, 1)
    out = {k.removesuffix("_sum"): v / n for k, v in sums.items()}
    out["grad_norm"] = grad_norm
    out["tokens"] = float(total_tokens)
    return out


__all__ = [
    "COMPUTE_DTYPES",
    "LearnerBackend",
    "accumulate",
    "as_fp32_master",
    "autocast",
    "compute_dtype",
    "finish_metrics",
    "kl_reference",
    "score_micro_batches",
]
