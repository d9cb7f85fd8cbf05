"""Rank 0 packs every rank's share of a step; the other ranks receive tensors, never samples.

A `RankPlan` is what one learner rank trains on in one step: for each policy, its optimizer steps
(`train.minibatches` of them), each with the micro-batches this rank runs and the step-wide loss
normalizer. Rank 0 builds all of them from the step's samples and advantages (`plan_step`) and
sends each rank its own (`scatter_plans`): a msgpack header naming every tensor's dtype and shape,
then the tensors' bytes, over `torch.distributed` point-to-point. Nothing is pickled, and a rank
never needs a `Sample`, the tokenizer or the grouping rules.

Every rank gets the same number of optimizer steps per policy (DeepSpeed's collectives need it);
a rank may get fewer micro-batches than another, or none (the backends pad their forward calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import msgspec
import numpy as np
import torch
import torch.distributed as dist

from atgrpo.learner.batching import build_microbatches, loss_normalizer
from atgrpo.learner.microbatch import MicroBatch
from atgrpo.messages import Sample


@dataclass
class OptimizerStep:
    micro_batches: list[MicroBatch]
    """This rank's micro-batches of the mini-batch."""
    total_tokens: int
    """The whole mini-batch's loss normalizer, over all ranks (>= 1)."""


@dataclass
class RankPlan:
    steps: dict[str, list[OptimizerStep]] = field(default_factory=dict)
    """Policy -> its optimizer steps this training step, in order."""
    final: bool = True
    """True: each `OptimizerStep` is stepped (its `total_tokens` normalises what was accumulated).
    False: a streamed chunk, one entry per policy whose micro-batches are only accumulated; the
    step's final plan follows."""


def plan_step(
    samples: Sequence[Sample],
    advantages: np.ndarray,
    *,
    policies: Sequence[str],
    pad_ids: dict[str, int],
    world: int,
    minibatches: int,
    max_tokens: int,
    aggregation: str,
    share_prefix: bool,
    response_budget: int = 0,
) -> list[RankPlan]:
    """One `RankPlan` per rank: each policy's samples, packed into micro-batches, cut into
    `minibatches` optimizer steps, and dealt out round-robin over the ranks. `response_budget`:
    `rollout.longest_response`, the constant of "seq_mean_token_sum" (`batching.loss_normalizer`)."""
    plans = [RankPlan() for _ in range(world)]
    for policy in policies:
        idx = [i for i, s in enumerate(samples) if s.policy == policy]
        mine = [samples[i] for i in idx]
        mbs = build_microbatches(
            mine,
            advantages[idx],
            max_tokens=max_tokens,
            pad_id=pad_ids[policy],
            aggregation=aggregation,
            share_prefix=share_prefix,
        )
        parts = np.array_split(np.arange(len(mbs)), minibatches) if mbs else [np.arange(0)]
        for part in parts:
            chunk = [mine[j] for i in part for j in mbs[i].sample_index]
            total = max(loss_normalizer(chunk, aggregation, response_budget), 1)
            for rank, plan in enumerate(plans):
                plan.steps.setdefault(policy, []).append(OptimizerStep([mbs[i] for i in part[rank::world]], total))
    return plans


def plan_chunk(
    samples: Sequence[Sample],
    advantages: np.ndarray,
    *,
    policies: Sequence[str],
    pad_ids: dict[str, int],
    world: int,
    max_tokens: int,
    aggregation: str,
    share_prefix: bool,
    response_budget: int = 0,
) -> tuple[list[RankPlan], dict[str, int]]:
    """A streamed part of a step: every rank's share of these samples' micro-batches (to accumulate,
    not to step on), and each policy's loss normalizer of them (the step's total is their sum)."""
    plans = plan_step(
        samples,
        advantages,
        policies=policies,
        pad_ids=pad_ids,
        world=world,
        minibatches=1,
        max_tokens=max_tokens,
        aggregation=aggregation,
        share_prefix=share_prefix,
        response_budget=response_budget,
    )
    for plan in plans:
        plan.final = False
    totals = {p: loss_normalizer([s for s in samples if s.policy == p], aggregation, response_budget) for p in policies}
    return plans, totals


def plan_finish(totals: dict[str, int], world: int) -> list[RankPlan]:
    """The final plan of a streamed step: no micro-batches, each policy's step-wide normalizer."""
    return [RankPlan({p: [OptimizerStep([], max(n, 1))] for p, n in sorted(totals.items())}) for _ in range(world)]


# -- shipping plans between ranks -------------------------------------------------------------------


class _TensorSpec(msgspec.Struct, array_like=True):
    name: str
    dtype: str
    shape: list[int]


class _StepSpec(msgspec.Struct, array_like=True):
    total_tokens: int
    micro_batches: list[list[_TensorSpec]]


class _PlanHeader(msgspec.Struct, array_like=True):
    """Rank 0 -> rank r, before the tensors: what follows, in order."""

    steps: dict[str, list[_StepSpec]]
    final: bool


_DTYPES = {str(t): t for t in (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)}


def _wire_device() -> torch.device:
    # NCCL moves only CUDA tensors; gloo (CPU jobs) only CPU ones.
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _send_bytes(buf: torch.Tensor, dst: int) -> None:
    if buf.numel():
        dist.send(buf.to(_wire_device()), dst)


def _recv_bytes(nbytes: int, src: int) -> torch.Tensor:
    buf = torch.empty(nbytes, dtype=torch.uint8, device=_wire_device())
    if nbytes:
        dist.recv(buf, src)
    return buf.cpu()


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def _send_plan(plan: RankPlan, dst: int) -> None:
    tensors: list[torch.Tensor] = []
    steps: dict[str, list[_StepSpec]] = {}
    for policy, opt_steps in plan.steps.items():
        for st in opt_steps:
            specs = []
            for mb in st.micro_batches:
                named = mb.tensors()
                specs.append([_TensorSpec(k, str(v.dtype), list(v.shape)) for k, v in named.items()])
                tensors.extend(named.values())
            steps.setdefault(policy, []).append(_StepSpec(st.total_tokens, specs))
    header = msgspec.msgpack.encode(_PlanHeader(steps, plan.final))
    dist.send(torch.tensor([len(header)], dtype=torch.int64, device=_wire_device()), dst)
    _send_bytes(torch.frombuffer(bytearray(header), dtype=torch.uint8), dst)
    for t in tensors:
        _send_bytes(_as_bytes(t), dst)


def _recv_plan(src: int = 0) -> RankPlan:
    size = torch.zeros(1, dtype=torch.int64, device=_wire_device())
    dist.recv(size, src)
    header = msgspec.msgpack.decode(_recv_bytes(int(size.item()), src).numpy().tobytes(), type=_PlanHeader)
    plan = RankPlan(final=header.final)
    for policy, specs in header.steps.items():
        for spec in specs:
            mbs = []
            for tensor_specs in spec.micro_batches:
                named = {}
                for ts in tensor_specs:
                    dtype = _DTYPES[ts.dtype]
                    count = int(np.prod(ts.shape, dtype=np.int64))
                    raw = _recv_bytes(count * torch.empty(0, dtype=dtype).element_size(), src)
                    named[ts.name] = raw.view(dtype).reshape(ts.shape)
                mbs.append(MicroBatch.from_tensors(named))
            plan.steps.setdefault(policy, []).append(OptimizerStep(mbs, spec.total_tokens))
    return plan


def scatter_plans(plans: list[RankPlan] | None, rank: int, world: int) -> RankPlan:
    """Rank 0 passes every rank's plan and keeps its own; the others pass None and receive theirs."""
    if world == 1:
        assert plans is not None
        return plans[0]
    if rank == 0:
        assert plans is not None and len(plans) == world
        for dst in range(1, world):
            _send_plan(plans[dst], dst)
        return plans[0]
    return _recv_plan(0)


def broadcast_flag(flag: bool, world: int) -> bool:
    """Rank 0's `flag` on every rank (e.g. "stop now"), as one small tensor."""
    if world == 1:
        return flag
    box = torch.tensor([int(flag)], dtype=torch.int64, device=_wire_device())
    dist.broadcast(box, src=0)
    return bool(box.item())


__all__ = ["OptimizerStep", "RankPlan", "broadcast_flag", "plan_chunk", "plan_finish", "plan_step", "scatter_plans"]
