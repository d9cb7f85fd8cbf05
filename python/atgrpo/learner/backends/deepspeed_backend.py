"""DeepSpeed learner backend: the same step as `TorchBackend`, with ZeRO stage 0-3 across ranks.

Invariants:

* Ownership. The backend owns the DeepSpeed engine, which owns the model (its `module`), the
  client `torch.optim.AdamW` and, under ZeRO, the fp32 master weights and optimizer state
  partitions. Nothing else touches the model's parameters or gradients; read weights through
  `export_weights`.
* Collectives. The constructor and every public method are collectives: every rank of the default
  process group must build the backend and call `train_step`, `export_weights`, `save_checkpoint`
  and `load_checkpoint`, in the same order. A rank that skips one blocks the others until the process
  group's timeout.
* One step = one optimizer update. The engine runs with `managed_gradient_accumulation: false` and
  `gradient_accumulation_steps: 1`: the caller (this class) owns the accumulation boundary and calls
  `engine.step()` once per `train_step`, however many micro-batches there were, and DeepSpeed never
  divides the loss by a GAS count (`backward(..., scale_wrt_gas=False)` on top of GAS 1).
* Gradient sum across ranks. The step's gradient is the SUM of the ranks' gradients. DeepSpeed
  AVERAGES over the data-parallel group, so each rank's loss is multiplied by the world size before
  backward.
* Normalising at the end (the contract's `finish_step`). Backward runs on unnormalised sums; the
  1 / total_tokens scale is applied by a pre-step hook on the client optimizer to exactly the
  gradients it is about to apply (under ZeRO the optimizer steps one flat fp32 partition group at a
  time, and each parameter's gradient is scaled once). ZeRO clips before that hook, on the unscaled gradient,
  so for that one update its clip threshold is `grad_clip * total_tokens` (the same decision and
  the same factor), and the reported norm is divided back. Without ZeRO this backend clips itself,
  after scaling.
* Uneven shares. Under ZeRO-2/3 every backward reduces gradients (and under ZeRO-3 every forward
  gathers parameters), so all ranks must run the same number of forward/backward passes. Each step
  first agrees on the largest micro-batch count (one all-reduce); a rank with fewer micro-batches,
  including none, pads with dummy passes over a two-token batch whose loss mask is empty (loss and
  gradient exactly zero, metrics zero). Every step takes exactly one optimizer update, even when no
  rank has any sample (AdamW then applies only weight decay and momentum, as `TorchBackend` does
  under `torch.distributed`).
* Metrics. Metric sums are all-reduced, so every rank returns the global metrics of the step.
* Precision (`deepspeed_config`): fp32 master weights, optimizer state and gradient accumulation
  in every stage; `dtype="bfloat16"` computes in bf16 (ZeRO 1-3: DeepSpeed's bf16 module with fp32
  accumulation; ZeRO-0: fp32 parameters under torch.autocast, as `TorchBackend`, re-entered inside
  the engine's forward by `_autocast_inside`, since DeepSpeed turns an outer CUDA autocast off). The update,
  its clipping and `grad_norm` always use the fp32 gradients. Under ZeRO 1-3 the masters start from
  the bf16-rounded weights (DeepSpeed casts the module before it copies them); exact for
  checkpoints shipped in bf16.
* Device. Micro-batches move to the engine's device in `base.accumulate`.
* LoRA (`adapter`, `learner.lora`). The policies of one base share one PeftModel but each has its
  own engine, so the engine's module is an `AdapterModule` holding this policy's adapter
  Parameters only (`adapter_module`): the optimizer, ZeRO 1/2 partitions, the broadcast, the
  gradient all-reduce, clipping and the engine's checkpoint cover the adapter and nothing else;
  the base and the other adapters are never touched. `model` stays the shared PeftModel (what the
  trainer reads: `base_state`, the device). ZeRO 0-2 only (`config.lora.LORA_ZERO3`); always
  fp32 parameters with bf16 compute under autocast (`deepspeed_config`). Exports are the adapter's
  peft-named tensors, as `TorchBackend`'s; `learner.json` beside the engine state names the
  adapter a checkpoint holds (null: a full model), checked before anything is loaded.

deepspeed is imported only here, and only when a `DeepSpeedBackend` is built: the rest of atgrpo
imports without it. Without CUDA it runs on DeepSpeed's CPU accelerator over gloo, with nothing
compiled (the optimizer is a plain torch one and no DeepSpeed C++ op is requested).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from atgrpo.config.lora import LORA_ZERO3
from atgrpo.devices import collective_backend, collective_device, model_device
from atgrpo.errors import PlacementError
from atgrpo.learner.backends.adapter_module import AdapterModule
from atgrpo.learner.backends.base import (
    LearnerBackend,
    accumulate,
    as_fp32_master,
    compute_dtype,
    finish_metrics,
    kl_reference,
    score_micro_batches,
)
from atgrpo.learner.backends.deepspeed_config import Precision, build_config, precision_plan
from atgrpo.learner.distributed import init_distributed_from_env
from atgrpo.learner.lora import AdapterWeights, check_checkpoint_adapter
from atgrpo.learner.loss import LossConfig
from atgrpo.learner.microbatch import MicroBatch, SharedPrefix

CHECKPOINT_TAG = "deepspeed"
"""Subfolder of the checkpoint folder holding the engine state (one fixed tag: one state per folder)."""
IDENTITY_FILE = "learner.json"
"""Beside the engine state: {"adapter": the LoRA policy whose adapter it holds, or null for a full model}."""

_SHM_COMM_OP = "deepspeed_shm_comm"


def _autocast_inside(module: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> None:
    """Run every forward of `module` under torch.autocast(`dtype`), entered inside the call.

    DeepSpeed 0.19.8's `engine.forward` wraps the module call in `autocast_if_enabled`, which, when
    an autocast is already on and the config has no `torch_autocast` section, enters
    `torch.autocast(enabled=False)`: the outer bf16 autocast that `base.accumulate` sets is switched
    off and the model computes in fp32 (5x slower on an H100, measured). Its check
    (`torch.is_autocast_enabled()` without a device) sees CUDA only, so on the CPU nothing showed it.
    The config's `torch_autocast` section is not the way round it: it sets a process-wide flag after
    which every ZeRO engine in the process, a full policy's bf16 one too, reduces gradients in each
    parameter's dtype instead of fp32. So the module re-enters autocast itself, inside DeepSpeed's
    context; the exit hook runs even when the forward raises, so the autocast state never leaks.
    The outer autocast stays for what runs outside the module (the KL reference)."""
    entered: list[torch.autocast] = []

    def enter(_module, _args):
        ctx = torch.autocast(device_type=device.type, dtype=dtype)
        ctx.__enter__()
        entered.append(ctx)

    def leave(_module, _args, _output):
        if entered:
            entered.pop().__exit__(None, None, None)

    module.register_forward_pre_hook(enter)
    module.register_forward_hook(leave, always_call=True)


def import_deepspeed(device: torch.device | None = None):
    """Import deepspeed with the accelerator of the learner's `device` (None: the CPU one when there
    is no GPU): a CPU learner on a GPU host must not get CUDA's, which would move its model to a GPU.

    DS_ACCELERATOR must be set before the first import (the accelerator is picked at import time and
    cached); an explicit setting in the environment wins. Raises `PlacementError` when deepspeed was
    already imported with another accelerator.
    """
    on_cpu = device.type != "cuda" if device is not None else not torch.cuda.is_available()
    if "DS_ACCELERATOR" not in os.environ and on_cpu:
        os.environ["DS_ACCELERATOR"] = "cpu"
    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from deepspeed.git_version_info import installed_ops

    if device is not None and (get_accelerator().device_name() == "cpu") != (device.type != "cuda"):
        raise PlacementError(
            f"DeepSpeed runs on its {get_accelerator().device_name()!r} accelerator but the learner's device is "
            f"{device}; set DS_ACCELERATOR before deepspeed is first imported"
        )

    if get_accelerator().device_name() == "cpu" and not installed_ops.get(_SHM_COMM_OP, False):
        # On the CPU accelerator DeepSpeed's communication wrapper JIT-compiles a shared-memory
        # all-reduce kernel whenever it thinks the op is buildable (a C++ toolchain, about a minute,
        # every fresh cache). Gloo's own collectives are all we need, so mark the op unbuildable; the
        # probed table is cached in `deepspeed.ops` and `build_shm_op` then returns None.
        deepspeed.ops.__compatible_ops__[_SHM_COMM_OP] = False
    return deepspeed


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _dummy_microbatch(device: torch.device, shared_prefix: bool) -> MicroBatch:
    """Two tokens, nothing to predict: a forward/backward that contributes exactly zero. In the
    layout the run uses, so that it makes as many forward calls as a real micro-batch (ZeRO-3)."""
    ids = torch.zeros((1, 2), dtype=torch.int64, device=device)
    zeros = torch.zeros((1, 2), dtype=torch.float32, device=device)
    prefix = None
    if shared_prefix:
        one = torch.ones((1, 1), dtype=torch.int64, device=device)
        prefix = SharedPrefix(ids=one, mask=one, row=torch.zeros(1, dtype=torch.int64, device=device))
    return MicroBatch(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        loss_mask=torch.zeros((1, 2), dtype=torch.bool, device=device),
        advantages=zeros,
        behaviour_logprobs=zeros,
        token_weights=zeros,
        sample_index=(),
        prefix=prefix,
    )


class DeepSpeedBackend(LearnerBackend):
    """`TorchBackend`'s step under DeepSpeed ZeRO `zero_stage` (0-3), on every rank of the job.

    `model` is the engine's module: under ZeRO-3 its parameters are partitioned placeholders, so
    read weights with `export_weights`, never from `model` directly.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        lr: float,
        weight_decay: float,
        grad_clip: float,
        loss_cfg: LossConfig,
        zero_stage: int = 1,
        dist_backend: str | None = None,
        timeout_s: float = 1800.0,
        extra_config: dict[str, Any] | None = None,
        shared_prefix: bool = False,
        dtype: str = "float32",
        adapter: AdapterWeights | None = None,
    ):
        """`extra_config` is deep-merged into the DeepSpeed config last (e.g. ZeRO-3 bucket sizes).
        `shared_prefix`: the run's micro-batches use the shared-prefix layout (`train.share_prefix`);
        the passes that keep ranks in step use it too. `dtype`: the compute dtype (`train.dtype`);
        the weights `model` holds become the fp32 masters. `adapter`: train only this LoRA adapter
        of `model` (its group's shared PeftModel; see the module docstring)."""
        if zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0..3, got {zero_stage}")
        if adapter is not None and zero_stage == 3:
            raise ValueError(f"LoRA policy {adapter.policy}: {LORA_ZERO3}")
        self.adapter = adapter
        self.compute_dtype = compute_dtype(dtype)
        self.precision = precision_plan(self.compute_dtype, zero_stage, lora=adapter is not None)
        model = as_fp32_master(model)
        device = model_device(model)
        # DeepSpeed puts rank r's module on accelerator device LOCAL_RANK, whatever device it came on.
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if device.type == "cuda" and device.index != local_rank:
            raise PlacementError(
                f"the learner's model is on {device}, but DeepSpeed would move it to cuda:{local_rank} (LOCAL_RANK); "
                f"use train.device = 'cuda' and choose the GPU with launch.learner_devices or CUDA_VISIBLE_DEVICES"
            )
        deepspeed = import_deepspeed(device)
        self._deepspeed = deepspeed
        # The job made the process group for the learner's device (atgrpo.devices); alone, follow the model.
        dist_backend = dist_backend or (
            dist.get_backend() if dist.is_initialized() else collective_backend(model_device(model))
        )
        init_distributed_from_env(dist_backend, timeout_s)
        # Adopts the torch.distributed group created above (it would otherwise try MPI discovery).
        deepspeed.init_distributed(dist_backend=dist_backend, auto_mpi_discovery=False, verbose=False)
        self.world_size = dist.get_world_size()
        self.rank = dist.get_rank()
        self.zero_stage = zero_stage
        self.grad_clip = grad_clip
        self.loss_cfg = loss_cfg
        # The KL reference is the initial policy (`base.kl_reference`): a full policy's is a frozen
        # replica on every rank, never given to DeepSpeed (so ZeRO-3 does not partition it), copied
        # before initialize() touches the model; a LoRA policy's is the shared base, adapters off.
        self.ref_model = kl_reference(model, adapter, self.compute_dtype) if loss_cfg.kl_coef else None

        model.train()
        module = model
        if adapter is not None:
            # Active before initialize: peft leaves inactive adapters without requires_grad, and
            # ZeRO takes only parameters requiring a gradient into its groups and gradient hooks.
            adapter.activate()
            module = AdapterModule(adapter)
        optimizer = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay)
        self.lr_optimizer = optimizer
        self._grad_norm: float | None = None
        self._scale = 1.0
        self._scaled: set[int] = set()
        self._sums: dict[str, float] = {}
        self._passes = 0
        optimizer.register_step_pre_hook(self._before_update)
        config = build_config(
            world_size=self.world_size,
            zero_stage=zero_stage,
            grad_clip=grad_clip,
            n_params=sum(p.numel() for p in module.parameters()),
            precision=self.precision,
        )
        if extra_config:
            config = _deep_merge(config, extra_config)
        self.config = config
        self.engine, self.optimizer, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=config)
        self.model = model if adapter is not None else self.engine.module
        self.device = self.engine.device
        if self.ref_model is not None and adapter is None:
            self.ref_model.to(self.device)  # wherever DeepSpeed put the policy, its reference goes too
        self._dummy = _dummy_microbatch(self.device, shared_prefix)
        if self.precision is Precision.autocast_bf16:
            _autocast_inside(self.engine.module, self.device, self.compute_dtype)

    def _before_update(self, optimizer, args, kwargs) -> None:
        # Scale what this update applies by 1 / total_tokens, each parameter's gradient once per step
        # (parameters live for the whole run, so their ids are not reused as a freed grad's could be).
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None and id(p) not in self._scaled:
                    self._scaled.add(id(p))
                    p.grad.mul_(self._scale)
        if self.zero_stage == 0:
            # Without ZeRO, DeepSpeed clips inside step() and throws the norm away; clip here instead,
            # after its all-reduce and the scaling, right before the update, and keep the norm.
            self._grad_norm = float(torch.nn.utils.clip_grad_norm_(self.engine.module.parameters(), self.grad_clip))

    def _all_reduce(self, values: list[float], op=dist.ReduceOp.SUM) -> list[float]:
        # float64 so that metric sums over many tokens do not lose digits; gloo and nccl both take it.
        t = torch.tensor(values, dtype=torch.float64, device=collective_device(self.device))
        dist.all_reduce(t, op=op)
        return t.tolist()

    def _padded(self, micro_batches: list[MicroBatch]) -> list[MicroBatch]:
        # Under ZeRO-2/3 every backward (and under ZeRO-3 every forward) is a collective: all ranks
        # agree on the number of passes, those with fewer micro-batches running dummies.
        passes = int(self._all_reduce([float(len(micro_batches))], dist.ReduceOp.MAX)[0])
        return list(micro_batches) + [self._dummy] * (passes - len(micro_batches))

    def score(self, micro_batches: list[MicroBatch]) -> list[torch.Tensor]:
        batches = self._padded(micro_batches)
        autocast_dtype = self.compute_dtype if self.precision is Precision.autocast_bf16 else None
        out = score_micro_batches(
            self.engine, batches, self.loss_cfg.temperature, device=self.device, autocast_dtype=autocast_dtype
        )
        return out[: len(micro_batches)]

    def accumulate(self, micro_batches: list[MicroBatch], proximal: list[torch.Tensor] | None = None) -> None:
        batches = self._padded(micro_batches)
        passes = len(batches)
        scale = float(self.world_size)  # DeepSpeed averages over ranks; the loss wants the sum

        def backward(loss: torch.Tensor) -> None:
            self.engine.backward(loss * scale, scale_wrt_gas=False)

        autocast_dtype = self.compute_dtype if self.precision is Precision.autocast_bf16 else None
        accumulate(
            self.engine,
            batches,
            self.loss_cfg,
            backward,
            self._sums,
            self.ref_model,
            device=self.device,
            autocast_dtype=autocast_dtype,
            proximal=proximal,  # the dummies past its end have none: their weights are 0
        )
        self._passes += passes

    def finish_step(self, total_tokens: int) -> dict[str, float]:
        if self._passes == 0:
            self.accumulate([self._dummy])  # every rank ran >= 1 pass through the loss, so the metric keys agree
        if self.adapter is not None:
            # Another policy of the group may have run since this one's backward (a streamed step),
            # and its activation took requires_grad off this adapter. ZeRO 1/2's plain step does not
            # read it (tested), but some of its step-time paths skip parameters without it (CPU
            # offload's gradient finalisation, coalesced reduction): step as at initialisation.
            self.adapter.activate()
        total = max(total_tokens, 1)
        self._grad_norm = None
        self._scale, self._scaled = 1.0 / total, set()
        if self.zero_stage > 0:
            self.engine.optimizer.clip_grad = self.grad_clip * total
        try:
            self.engine.step()
        finally:
            if self.zero_stage > 0:
                self.engine.optimizer.clip_grad = self.grad_clip
            self._scaled, self._passes = set(), 0
        if self.zero_stage == 0:
            grad_norm = self._grad_norm
        else:
            norm = self.engine.get_global_grad_norm()
            grad_norm = None if norm is None else float(norm) / total
        sums = self._take_sums()
        keys = sorted(sums)
        sums = dict(zip(keys, self._all_reduce([sums[k] for k in keys])))
        return finish_metrics(sums, total_tokens, float(grad_norm) if grad_norm is not None else float("nan"))

    @property
    def export_is_collective(self) -> bool:
        return self.zero_stage == 3

    def export_weights(self, to_host: bool = True) -> dict[str, torch.Tensor]:
        def snapshot() -> dict[str, torch.Tensor]:
            # copy: under ZeRO-3 the gathered storage is freed when the context exits. In the compute
            # dtype (base): a no-op for DeepSpeed's bf16 module, which holds bf16(master) after every step.
            # A rank that only joins the gather copies nothing (`to_host`).
            return self.host_copy(self.published_state(), self.compute_dtype) if to_host else {}

        if self.zero_stage == 3:
            params = list(self.model.parameters())
            with self._deepspeed.zero.GatheredParameters(params, modifier_rank=None):
                return snapshot()
        return snapshot()

    def save_checkpoint(self, folder: Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.engine.save_checkpoint(str(folder), tag=CHECKPOINT_TAG, save_latest=False)
        # The engine state names an adapter's tensors by position (`AdapterModule`): say whose they are.
        # Every rank writes it (the same bytes), so every rank finds it on its own disk at load.
        (folder / IDENTITY_FILE).write_text(json.dumps({"adapter": self.adapter_policy}))

    def load_checkpoint(self, folder: Path) -> None:
        # DeepSpeed asserts deep inside its loader on a missing tag; say what is missing instead.
        # Every rank checks, so on a missing folder all of them raise and none waits in a collective.
        if not (Path(folder) / CHECKPOINT_TAG).is_dir():
            raise FileNotFoundError(f"no DeepSpeed checkpoint (tag {CHECKPOINT_TAG!r}) in {folder}")
        identity = Path(folder) / IDENTITY_FILE  # absent: written before adapters existed, a full model
        found = json.loads(identity.read_text())["adapter"] if identity.is_file() else None
        check_checkpoint_adapter(Path(folder), found, self.adapter_policy)
        path, _ = self.engine.load_checkpoint(str(folder), tag=CHECKPOINT_TAG)
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint (tag {CHECKPOINT_TAG!r}) in {folder}")
