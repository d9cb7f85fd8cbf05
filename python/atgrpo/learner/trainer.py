"""The trainer: one rank's backends, trained on that rank's share of each step, then exported.

Every rank of the learner job holds one `Trainer`, which owns a replica (or a ZeRO shard) of every
policy's backend: its model and optimizer, and nothing else. It never sees samples: rank 0's
orchestrator packs each rank's micro-batches (`packing.RankPlan`), and `train` runs that rank's
forward/backward passes and optimizer steps. Gradients are summed across ranks inside the backends,
so every rank ends the step with the same weights (`export` checks it).

A policy's version counts its training steps: version v is the weights after v steps. The trainer
counts them; they become current for actors only when the hub publishes them.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist

from atgrpo.config import RunConfig
from atgrpo.devices import collective_device, resolve_device
from atgrpo.errors import CheckpointWriteError
from atgrpo.learner.backends import LearnerBackend, make_backend
from atgrpo.learner.checkpoints import (
    RunState,
    export_model_folder,
    latest_checkpoint,
    mark_incomplete,
    mark_latest,
    read_state,
    step_folder,
    write_state,
)
from atgrpo.learner.lora import base_state, load_shared_bases
from atgrpo.learner.loss import LossConfig
from atgrpo.learner.lr_schedule import lr_at
from atgrpo.learner.packing import OptimizerStep, RankPlan
from atgrpo.learner.proximal import train_policy_step
from atgrpo.learner.replicas import differing_tensors
from atgrpo.learner.retention import prune_checkpoints
from atgrpo.models.adapters import merge_adapter, scaling, write_adapter
from atgrpo.models.folder import load_model, load_tokenizer
from atgrpo.paths import policy_dir

log = logging.getLogger("atgrpo.learner")

ADAPTER_DIR = "adapter"
"""Folder of a LoRA policy's checkpoint holding its adapter in peft's format (`PeftModel.from_pretrained`)."""


def loss_config(cfg: RunConfig) -> LossConfig:
    """The loss of a run: logits at the rollout temperature, as the engines sampled them; the
    importance-weight cap only when stale samples are admitted."""
    low, high = cfg.train.clip_range
    return LossConfig(
        clip_eps_low=low,
        clip_eps_high=high,
        temperature=cfg.rollout.temperature,
        entropy_coef=cfg.train.entropy_coef,
        kl_coef=cfg.train.kl_coef,
        is_cap=cfg.train.is_cap if cfg.train.max_staleness > 0 else None,
        ratio_level=cfg.train.ratio_level,
    )


class Trainer:
    def __init__(self, cfg: RunConfig, rank: int = 0, world_size: int = 1, device: torch.device | None = None) -> None:
        """`device`: where this rank trains (`atgrpo.devices.resolve_device`, made by the job);
        None: `train.device` of a single process."""
        self.cfg = cfg
        self.rank = rank
        self.world = world_size
        self.device = device if device is not None else resolve_device(cfg.train.device)
        self.policies = sorted(cfg.policies)
        self.versions = {p: 0 for p in self.policies}
        self.pad_ids: dict[str, int] = {}
        self.backends: dict[str, LearnerBackend] = {}
        self._busy_s = 0.0
        # LoRA policies: each group's frozen base loaded once, one adapter per policy (learner.lora)
        adapters = load_shared_bases(cfg, {p: policy_dir(cfg, p) for p in self.policies}, str(self.device))
        for p in self.policies:
            folder = policy_dir(cfg, p)
            adapter = adapters.get(p)
            # fp32: the master weights; train.dtype is the compute dtype (learner.backends.base)
            model = (
                adapter.model if adapter is not None else load_model(folder, dtype="float32", device=str(self.device))
            )
            self.pad_ids[p] = load_tokenizer(folder).pad_token_id
            pc = cfg.policies[p]
            self.backends[p] = make_backend(model, cfg.train, pc.lr, pc.weight_decay, loss_config(cfg), adapter=adapter)

    def train(self, plan: RankPlan) -> dict[str, float]:
        """This rank's share of one plan of a training step. A streamed chunk (`plan.final` False)
        is only accumulated and returns {}; a final plan takes every policy's optimizer steps
        (`proximal.train_policy_step`) and returns `learner/<p>/*` metrics (of the last optimizer
        step; pipelined, also the proximal pass's) and `time/learner_s` (the step's compute,
        chunks included)."""
        t0 = time.perf_counter()
        out: dict[str, float] = {}
        for p, be in self.backends.items():  # every policy, in the same order on every rank (collectives)
            steps = plan.steps.get(p) or [OptimizerStep([], 1)]
            if not plan.final:
                for st in steps:
                    be.accumulate(st.micro_batches)
                continue
            pc = self.cfg.policies[p]
            lr = lr_at(pc.lr_schedule, pc.lr, pc.lr_min, pc.lr_warmup_steps, self.versions[p], self.cfg.run.steps)
            be.set_lr(lr)
            metrics = train_policy_step(be, steps, decoupled=self.cfg.train.max_staleness > 0)
            self.versions[p] += 1
            out.update({f"learner/{p}/{k}": v for k, v in metrics.items()})
            out[f"learner/{p}/lr"] = lr
            out[f"learner/{p}/version"] = float(self.versions[p])
        self._busy_s += time.perf_counter() - t0
        if plan.final and self.device.type == "cuda" and self.cfg.rollout.vllm_sleep_when_idle:
            torch.cuda.empty_cache()  # hand the step's activations back, so a colocated engine can wake
        if plan.final:
            out["time/learner_s"], self._busy_s = self._busy_s, 0.0
        return out

    def export(self) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, float]]:
        """Every rank calls it. Rank 0 gets every policy's full weights in host memory, to publish
        (staged through pinned memory on a GPU, `LearnerBackend.host_copy`), each tied tensor once
        (`models.tied`); the other ranks get {} and copy nothing to the host (under ZeRO-3 they
        join the gather, which is a collective, and copy nothing either).
        With several replicas also `learner/<p>/replica_mismatch`: 1 when the ranks' weights differ
        (what actors get is rank 0's; a diverged replica is logged with the tensors that differ).
        Ranks compare a fingerprint of their weights computed where the weights lie
        (`replicas.differing_tensors`: on the GPU, one all_gather on the collective's device)."""
        weights, out = {}, {}
        for p, be in self.backends.items():
            collective = be.export_is_collective
            publishing = self.rank == 0
            tensors = be.export_weights(to_host=publishing) if publishing or collective else None
            if self.world > 1 and not collective:
                # Every rank fingerprints its replica where it lies. A collective export (ZeRO-3) has
                # no replicas, only shards of one model, so there is nothing to compare.
                own = be.published_state()
                where = collective_device(next(be.model.parameters()).device)
                differ = differing_tensors(own, where)
                out[f"learner/{p}/replica_mismatch"] = float(bool(differ))
                if differ:
                    log.error(
                        "policy %s v%d: ranks hold different weights in %d tensors, e.g. %s",
                        p,
                        self.versions[p],
                        len(differ),
                        differ[:5],
                    )
            if tensors is not None and self.rank == 0:
                weights[p] = tensors
        return weights, out

    # -- checkpoints ---------------------------------------------------------------------------------
    def save(self, folder: Path, state: RunState | None, extra: dict[str, bytes] | None = None) -> None:
        """Every rank: its backends' state under `folder/<policy>/`; rank 0 (with `state`) also each
        policy as an HF folder (a LoRA policy: merged into its base, and its adapter alone in peft's
        format under `<policy>/adapter/`), the run state and the `extra` files (name -> bytes). The caller
        marks the checkpoint complete."""
        for p, be in self.backends.items():
            be.save_checkpoint(folder / p)
            if state is None and not be.export_is_collective:
                continue
            # A collective under ZeRO-3, which every rank joins; only rank 0 (with `state`) copies.
            tensors = be.export_weights(to_host=state is not None)
            if state is None:
                continue
            lora = self.cfg.policies[p].lora
            if lora is not None:  # the adapter on its own (peft's format), and merged into its base for eval
                write_adapter(folder / p / ADAPTER_DIR, lora, tensors, policy_dir(self.cfg, p))
                # On the host, like the adapter's exported tensors: the base lies on the learner's device.
                base = {k: t.detach().cpu() for k, t in base_state(be.model).items()}
                tensors = merge_adapter(base, tensors, scaling(lora))
            export_model_folder(policy_dir(self.cfg, p), tensors, folder / p / "model")
        if state is not None:
            for name, data in (extra or {}).items():
                (folder / name).write_bytes(data)
            write_state(folder, state)

    def checkpoint(self, root: Path, state: RunState, *, rank0: bool, extra: dict[str, bytes] | None = None) -> Path:
        """Every rank: write checkpoint `root/step_<n>`; rank 0 marks it complete and the latest once
        every rank's part is on disk, then removes the checkpoints past `run.keep_checkpoints`
        (`learner.retention`). A failed write removes the half-written folder and raises
        `CheckpointWriteError`; the previous checkpoint stays the latest and loadable. A failed
        removal is logged, not raised: the new checkpoint is complete, and the next one retries."""
        folder = step_folder(root, state.step)
        try:
            if rank0:
                mark_incomplete(folder)  # a step written again after a resume is not complete until marked anew
            self.save(folder, state if rank0 else None, extra if rank0 else None)
            if self.world > 1:
                dist.barrier()  # every rank's part is on disk before the checkpoint is marked complete
            if rank0:
                mark_latest(folder)
        except Exception as exc:  # disk full, permissions, a torch writer error: all mean "not written"
            shutil.rmtree(folder, ignore_errors=True)
            raise CheckpointWriteError(
                f"could not write checkpoint {folder}: {exc}; the latest complete checkpoint is still "
                f"{latest_checkpoint(root) or 'none'}"
            ) from exc
        if rank0:  # after the barrier and the mark: every removal has a newer complete checkpoint
            run = self.cfg.run
            try:
                removed = prune_checkpoints(root, run.keep_checkpoints, run.keep_checkpoint_steps)
            except OSError as exc:
                log.error("could not remove old checkpoints under %s (retried at the next checkpoint): %s", root, exc)
            else:
                if removed:
                    log.info(
                        "removed checkpoints %s (run.keep_checkpoints = %d)", ", ".join(removed), run.keep_checkpoints
                    )
        return folder

    def load(self, folder: Path) -> RunState:
        """Every rank: restore the backends (and the RNG states) from a checkpoint; returns its run state."""
        state = read_state(folder)
        for p, be in self.backends.items():
            be.load_checkpoint(folder / p)
        self.versions = dict(state.versions)
        return state


__all__ = ["Trainer", "loss_config"]
