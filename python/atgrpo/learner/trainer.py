"""The learner job: per-policy backends, the step loop, evaluation rounds, checkpoints, metrics.

Rank 0 owns the hub (actors, versions, data cursor) and does all I/O; every rank owns a replica (or
ZeRO shard) of every policy's backend. Per step: rank 0 opens a round of units, waits for all
samples, computes advantages once over the whole step (Rust kernel), and broadcasts the samples and
advantages; each rank trains on its slice of every policy's micro-batches; rank 0 then bumps each
policy's version and publishes the new weights. In strict mode the next round opens only after the
publish, so no actor can produce a sample with an old version.

Data cursor: step s uses training seeds `seed_base + s * envs_per_step + i`; evaluation uses eval
seeds 0..eval_seeds-1 of the "eval" split. Both are pure functions of the step, so a resumed run
sees exactly the levels an uninterrupted run would have.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from atgrpo import kernels
from atgrpo.config import GAME_TASKS, RunConfig
from atgrpo.learner.backends import make_backend
from atgrpo.learner.batching import loss_normalizer
from atgrpo.learner.hub import Hub, StepData
from atgrpo.learner.ledger import VersionLedger
from atgrpo.learner.loss import LossConfig
from atgrpo.learner.shared_prefix import microbatch_builder
from atgrpo.messages import Sample
from atgrpo.metrics import MetricsWriter, step_metrics
from atgrpo.models.folder import copy_model_files, load_model, load_tokenizer
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import checkpoints_dir, out_dir, policy_dir, source_model_dir
from atgrpo.transport.tensors import weights_checksum

log = logging.getLogger("atgrpo.learner")

SEED_BASE = 0
"""Training seeds of step s are SEED_BASE + s * envs_per_step + i (demos use a disjoint range)."""


def step_seeds(cfg: RunConfig, step: int) -> list[int]:
    n = cfg.rollout.envs_per_step
    return [SEED_BASE + step * n + i for i in range(n)]


def compute_advantages(samples: list[Sample], grouping: str) -> tuple[np.ndarray, kernels.GroupStats, int]:
    """Advantages for the step's samples (in order), the group statistics and the group count."""
    if not samples:
        empty = np.zeros(0)
        return empty, kernels.GroupStats(empty, empty, empty.astype(np.int64), 0, 0, 0, 0), 0
    rewards = np.fromiter((s.reward for s in samples), np.float64, len(samples))
    if grouping == "trajectory":
        # One row per (env, branch): an episode's samples share its return and count once in the baseline.
        rows = np.array([(s.key.env, s.branch) for s in samples], dtype=np.int64)
        uniq, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        zeros = np.zeros(len(uniq), dtype=np.int64)
        out = kernels.compute_advantages(uniq[:, 0], zeros, zeros, rewards[first])
        return out.advantages[inverse.reshape(-1)], out.stats, out.num_groups
    env = np.fromiter((s.key.env for s in samples), np.int64, len(samples))
    agent = np.fromiter((s.key.agent for s in samples), np.int64, len(samples))
    turn = np.fromiter((s.key.turn for s in samples), np.int64, len(samples))
    out = kernels.compute_advantages(env, agent, turn, rewards)
    return out.advantages, out.stats, out.num_groups


def advantage_metrics(adv: np.ndarray, stats: kernels.GroupStats) -> dict[str, float]:
    out = {
        "advantage/mean": float(adv.mean()) if adv.size else 0.0,
        "advantage/abs_mean": float(np.abs(adv).mean()) if adv.size else 0.0,
        "advantage/zero_frac": float((adv == 0).mean()) if adv.size else 0.0,
        "advantage/group_std_mean": float(np.nanmean(stats.std)) if stats.std.size else 0.0,
        "advantage/group_size_mean": float(stats.size.mean()) if stats.size.size else 0.0,
    }
    for name in ("num_singleton", "num_constant", "num_empty", "num_nonfinite"):
        out[f"advantage/{name.removeprefix('num_')}_groups" if name != "num_nonfinite" else "advantage/nonfinite_rewards"] = float(getattr(stats, name))
    return out


class Trainer:
    def __init__(self, cfg: RunConfig, hub: Hub | None, rank: int = 0, world_size: int = 1) -> None:
        self.cfg = cfg
        self.hub = hub
        self.rank = rank
        self.world = world_size
        self.policies = sorted(cfg.policies)
        self.versions = {p: 0 for p in self.policies}
        self.step = 0
        self.eval_start: float | None = None
        """Held-out success before any training step; kept in checkpoints, so a resumed run reports
        its improvement from the start of training, not from where it resumed."""
        self.pad_ids: dict[str, int] = {}
        self.backends = {}
        loss_cfg = LossConfig(
            clip_eps=cfg.train.clip_eps,
            temperature=cfg.rollout.temperature,
            entropy_coef=cfg.train.entropy_coef,
            kl_coef=cfg.train.kl_coef,
            is_cap=cfg.train.is_cap if cfg.train.max_staleness > 0 else None,
        )
        for p in self.policies:
            folder = policy_dir(cfg, p)
            model = load_model(folder, dtype=cfg.train.dtype, device=cfg.train.device)
            self.pad_ids[p] = load_tokenizer(folder).pad_token_id
            pc = cfg.policies[p]
            self.backends[p] = make_backend(model, cfg.train, pc.lr, pc.weight_decay, loss_cfg)
        self.metrics = MetricsWriter(out_dir(cfg), tensorboard=cfg.metrics.tensorboard, wandb=cfg.metrics.wandb) if rank == 0 else None

    # -- checkpoints -----------------------------------------------------------------------------
    def save(self) -> Path:
        """A resumable checkpoint; each policy's weights also as an HF folder (`<policy>/model/`) that
        `atgrpo-eval`, transformers or vLLM load directly."""
        folder = checkpoints_dir(self.cfg) / f"step_{self.step:06d}"
        for p, be in self.backends.items():
            be.save_checkpoint(folder / p)
            tensors = be.export_weights()  # collective under ZeRO-3: every rank calls it
            if self.rank == 0:
                export_model_folder(policy_dir(self.cfg, p), tensors, folder / p / "model")
        if self.rank == 0:
            state = {
                "step": self.step,
                "versions": self.versions,
                "eval_start": self.eval_start,
                "python_rng": random.getstate()[1][:5],
            }
            torch.save(
                {"torch_rng": torch.random.get_rng_state(), "numpy_rng": np.random.get_state()[1]},
                folder / "rng.pt",
            )
            (folder / "state.json").write_text(json.dumps(state, default=list))
            (checkpoints_dir(self.cfg) / "latest").write_text(folder.name)  # written last: marks it complete
        if dist.is_available() and dist.is_initialized():
            dist.barrier()
        return folder

    def try_resume(self) -> bool:
        marker = checkpoints_dir(self.cfg) / "latest"
        if not (self.cfg.run.resume and marker.is_file()):
            return False
        folder = checkpoints_dir(self.cfg) / marker.read_text().strip()
        state = json.loads((folder / "state.json").read_text())
        for p, be in self.backends.items():
            be.load_checkpoint(folder / p)
        rng = torch.load(folder / "rng.pt", weights_only=False)
        torch.random.set_rng_state(rng["torch_rng"])
        self.step = int(state["step"])
        self.versions = {p: int(v) for p, v in state["versions"].items()}
        self.eval_start = state.get("eval_start")
        log.info("resumed from %s at step %d, versions %s", folder, self.step, self.versions)
        return True

    # -- one step ----------------------------------------------------------------------------------
    def publish(self) -> dict[str, float]:
        """Publish every policy's current weights (rank 0). With several ranks, first check that every
        rank holds the same weights: a replica that diverged is logged and counted in
        `learner/<policy>/replica_mismatch` (what the actors get is rank 0's)."""
        out: dict[str, float] = {}
        for p, be in self.backends.items():
            tensors = be.export_weights()  # collective under ZeRO-3: every rank calls it
            if self.world > 1:
                prints: list[int | None] = [None] * self.world
                dist.all_gather_object(prints, weights_checksum(tensors))
                diverged = len(set(prints)) > 1
                out[f"learner/{p}/replica_mismatch"] = float(diverged)
                if diverged:
                    log.error("policy %s v%d: ranks hold different weights (crc32 per rank %s)", p, self.versions[p], prints)
            if self.hub is not None:
                self.hub.ledger.versions[p] = self.versions[p]
                self.hub.publish(p, self.versions[p], tensors)
        return out

    def collect(self, step: int) -> StepData | None:
        if self.hub is None:
            return None
        cfg = self.cfg
        self.hub.open_round(step, step_seeds(cfg, step), cfg.rollout.envs_per_unit, split="train", greedy=False)
        return self.hub.wait_round(stall_timeout_s=cfg.transport.step_timeout_s)

    def train_on(self, data: StepData | None) -> dict[str, float]:
        samples: list[Sample] = data.samples if data is not None else []
        if self.world > 1:
            box = [samples]
            dist.broadcast_object_list(box, src=0)
            samples = box[0]
        t0 = time.perf_counter()
        adv, stats, groups = compute_advantages(samples, self.cfg.rollout.grouping)
        out: dict[str, float] = {"learner/groups": float(groups), "learner/samples": float(len(samples))}
        out.update(advantage_metrics(adv, stats))
        for p, be in self.backends.items():
            idx = [i for i, s in enumerate(samples) if s.policy == p]
            chosen = [samples[i] for i in idx]
            agg = self.cfg.train.loss_aggregation
            mbs = microbatch_builder(self.cfg.train.share_prefix)(chosen, adv[idx], max_tokens=self.cfg.train.micro_batch_tokens, pad_id=self.pad_ids[p], aggregation=agg)
            parts = np.array_split(np.arange(len(mbs)), self.cfg.train.minibatches) if mbs else [np.arange(0)]
            metrics: dict[str, float] = {}
            for part in parts:
                chunk = [chosen[j] for i in part for j in mbs[i].sample_index]
                mine = [mbs[i] for i in part[self.rank :: self.world]]
                metrics = be.train_step(mine, max(loss_normalizer(chunk, agg), 1))
            self.versions[p] += 1
            out.update({f"learner/{p}/{k}": v for k, v in metrics.items()})
            out[f"learner/{p}/version"] = float(self.versions[p])
        out["time/learner_s"] = time.perf_counter() - t0
        return out

    def evaluate(self, tag: str) -> dict[str, float]:
        """Greedy rollouts on the held-out seeds, done by the actors like any other round."""
        if self.hub is None:
            return {}
        cfg = self.cfg
        t0 = time.perf_counter()
        self.hub.open_round(-1, list(range(cfg.run.eval_seeds)), cfg.rollout.envs_per_unit * 4, split="eval", greedy=True)
        data = self.hub.wait_round(stall_timeout_s=cfg.transport.step_timeout_s)
        succ = float(np.mean([e.success for e in data.envs])) if data.envs else float("nan")
        ret = float(np.mean([e.episode_return for e in data.envs])) if data.envs else float("nan")
        log.info("eval (%s) at step %d: success %.3f over %d held-out levels", tag, self.step, succ, len(data.envs))
        return {"eval/success": succ, "eval/return": ret, "eval/levels": float(len(data.envs)), "time/eval_s": time.perf_counter() - t0}

    def run(self, stop_requested=lambda: False) -> dict[str, Any]:
        cfg = self.cfg
        summary: dict[str, Any] = {}
        self.publish()
        if self.rank == 0:
            if self.eval_start is None:  # a resumed run keeps the step-0 evaluation of the run it continues
                first = self.evaluate("start")
                self.eval_start = first.get("eval/success")
                self.metrics.write(self.step, first)
            summary["eval_start"] = self.eval_start
        start = time.monotonic()
        while self.step < cfg.run.steps:
            flag = [bool(stop_requested()) or (cfg.run.time_limit_s > 0 and time.monotonic() - start > cfg.run.time_limit_s)]
            if self.world > 1:
                dist.broadcast_object_list(flag, src=0)
            if flag[0]:
                log.info("stopping early at step %d", self.step)
                break
            data = self.collect(self.step)
            metrics = self.train_on(data)
            self.step += 1
            metrics.update(self.publish())
            if self.rank == 0:
                metrics.update(step_metrics(data))
                metrics.update(self.hub.metrics())
                if cfg.run.eval_every and self.step % cfg.run.eval_every == 0 and self.step < cfg.run.steps:
                    metrics.update(self.evaluate(f"step {self.step}"))
                self.metrics.write(self.step, metrics)
            if cfg.run.checkpoint_every and self.step % cfg.run.checkpoint_every == 0:
                self.save()
        self.save()
        if self.rank == 0:
            final = self.evaluate("end")
            self.metrics.write(self.step, final)
            summary["eval_end"] = final.get("eval/success")
            summary["steps"] = self.step
            self.metrics.close()
        return summary


def prepare_models(cfg: RunConfig, log_fn=log.info) -> None:
    """Rank 0, before anything else: build the tiny model for policies without a path and warm-start
    it, and warm-start a copy of each path model with `warmstart.pretrained`."""
    from atgrpo.learner.warmstart import warm_start
    from atgrpo.workflows.games import GameWorkflow

    for p in sorted(cfg.policies):
        folder, source = policy_dir(cfg, p), source_model_dir(cfg, p)
        if folder == source or (folder / "config.json").is_file():
            continue  # a path model used as it is, or a model this run already prepared
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        built = source is None
        if source is None:
            build_tiny_model(cfg.policies[p].tiny, tmp)
            source = tmp
        model, tok = load_model(source), load_tokenizer(source)
        ws = cfg.warmstart
        if ws.steps and cfg.task.task not in GAME_TASKS:
            log_fn(f"[{p}] no solver demonstrations for task {cfg.task.task}: warm start skipped")
        elif ws.steps:
            torch.manual_seed(cfg.run.seed)
            # Demos of this policy's roles only, made by the whole team (so the plan agent's prompts
            # show the tool agent's answer, as in every rollout).
            warm_start(
                model, tok, GameWorkflow(cfg), steps=ws.steps, batch_size=ws.batch_size, lr=ws.lr,
                tool_noise=ws.tool_noise, seed=cfg.run.seed, log=lambda m: log_fn(f"[{p}] {m}"), roles=cfg.roles_of(p),
                answers_only=not built,
            )
        model.save_pretrained(tmp)
        if not built:
            copy_model_files(source, tmp)
        tmp.rename(folder)


def export_model_folder(base: Path, tensors: dict[str, torch.Tensor], dest: Path) -> None:
    """`base`'s architecture and tokenizer with `tensors` as weights, saved as an HF folder at `dest`.

    The architecture is built on the meta device from `base`'s config (no weights are read: for a
    large model, loading it again at every checkpoint would cost more than the checkpoint)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base, local_files_only=True)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(tensors, strict=False, assign=True)
    # Tied output embeddings are exported under one name only; anything else missing is a bug.
    tied = getattr(model, "_tied_weights_keys", None) or ()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise RuntimeError(f"exported weights do not fit {base}: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    model.save_pretrained(dest)
    copy_model_files(base, dest)
