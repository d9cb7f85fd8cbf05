"""Rank 0 packs each rank's micro-batches and ships them as tensors: what a rank receives is exactly
what rank 0 planned for it (both layouts), every rank gets the same number of optimizer steps, and
the plan covers every sample of each policy exactly once."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from spawned_ranks import spawn_ranks

from atgrpo.learner.distributed import free_port
from atgrpo.learner.packing import broadcast_flag, plan_step, scatter_plans
from atgrpo.messages import GroupKey, Sample

POLICIES = ("plan", "tool")


def step_samples(seed: int = 0) -> list[Sample]:
    rng = np.random.default_rng(seed)
    out = []
    for env in range(4):
        for agent, role in enumerate(POLICIES):
            prompt = [int(t) for t in rng.integers(3, 50, size=int(rng.integers(2, 7)))]
            for b in range(3):
                n = int(rng.integers(1, 6))
                out.append(
                    Sample(
                        "r",
                        role,
                        0,
                        0,
                        role,
                        GroupKey(env, agent, 0),
                        prompt,
                        [int(t) for t in rng.integers(3, 50, size=n)],
                        [float(x) for x in -rng.random(n)],
                        float(rng.normal()),
                        0.0,
                        0.0,
                        branch=b,
                    )
                )
    return out


def make_plans(world: int, share_prefix: bool, minibatches: int = 2):
    samples = step_samples()
    adv = np.linspace(-1.0, 1.0, len(samples))
    return samples, plan_step(
        samples,
        adv,
        policies=POLICIES,
        pad_ids={p: 0 for p in POLICIES},
        world=world,
        minibatches=minibatches,
        max_tokens=24,
        aggregation="token_mean",
        share_prefix=share_prefix,
    )


@pytest.mark.parametrize("share_prefix", [False, True])
def test_plan_covers_every_sample_once_and_splits_evenly(share_prefix: bool) -> None:
    samples, plans = make_plans(3, share_prefix)
    for p in POLICIES:
        counts = {len(plan.steps[p]) for plan in plans}
        assert counts == {2}, "every rank takes part in every optimizer step"
        seen = [i for plan in plans for st in plan.steps[p] for mb in st.micro_batches for i in mb.sample_index]
        mine = [i for i, s in enumerate(samples) if s.policy == p]
        assert sorted(seen) == list(range(len(mine))), "each of the policy's samples once"
        for k in range(2):
            totals = {plan.steps[p][k].total_tokens for plan in plans}
            assert len(totals) == 1  # the normalizer is the mini-batch's, the same on every rank
            rows = [mine[i] for plan in plans for mb in plan.steps[p][k].micro_batches for i in mb.sample_index]
            assert totals == {sum(len(samples[i].response_ids) for i in rows)}


def _rank_main(rank: int, world: int, port: int, failures) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        for share_prefix in (False, True):
            _, plans = make_plans(world, share_prefix)  # every rank computes it here only to check
            got = scatter_plans(plans if rank == 0 else None, rank, world)
            want = plans[rank]
            assert got.steps.keys() == want.steps.keys()
            for p in want.steps:
                for a, b in zip(got.steps[p], want.steps[p], strict=True):
                    assert a.total_tokens == b.total_tokens
                    for x, y in zip(a.micro_batches, b.micro_batches, strict=True):
                        tx, ty = x.tensors(), y.tensors()
                        assert tx.keys() == ty.keys() and (x.prefix is None) == (y.prefix is None)
                        for k in tx:
                            assert tx[k].dtype == ty[k].dtype and torch.equal(tx[k], ty[k]), k
        assert broadcast_flag(rank == 0, world) is True
        assert broadcast_flag(False, world) is False
    except BaseException as exc:  # reported to the test process
        failures.put(f"rank {rank}: {type(exc).__name__}: {exc}")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.integration
def test_each_rank_receives_exactly_its_plan() -> None:
    world = 3
    spawn_ranks(_rank_main, world, world, free_port())
