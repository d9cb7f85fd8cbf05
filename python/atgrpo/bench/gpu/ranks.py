"""One rank of `atgrpo-bench gpu`'s two-rank check; run under torchrun, `python -m
atgrpo.bench.gpu.ranks MODEL_FOLDER [--device cpu]`.

Each rank takes its device from `atgrpo.devices` (cuda:LOCAL_RANK), joins the process group of that
device (NCCL on GPUs), receives its plan from rank 0 over the wire the learner uses
(`packing.scatter_plans`), trains one step (gradients all-reduced), and the ranks compare a
checksum of their weights with an all-gather on the collective device. Exit 0: equal replicas.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", help="HF model folder")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    from atgrpo.config import TrainSection
    from atgrpo.devices import activate, collective_backend, collective_device, resolve_device
    from atgrpo.learner import distributed
    from atgrpo.learner.backends import make_backend
    from atgrpo.learner.batching import pair_microbatches
    from atgrpo.learner.loss import LossConfig
    from atgrpo.learner.packing import OptimizerStep, RankPlan, scatter_plans
    from atgrpo.models.folder import load_model, load_tokenizer
    from atgrpo.transport.tensors import weights_checksum

    job = distributed.dist_env()
    device = resolve_device(args.device, local_rank=job.local_rank, world_size=job.world_size)
    activate(device)
    env = distributed.init_distributed_from_env(collective_backend(device), timeout_s=300)
    torch.manual_seed(0)
    model = load_model(args.model, device=str(device))
    backend = make_backend(model, TrainSection(device=args.device), 1e-5, 0.0, LossConfig())
    plans = None
    if env.rank == 0:
        pad = load_tokenizer(args.model).pad_token_id
        shares = [[([1, 2, 3, 4], [5, 6, 7])], [([1, 2, 3], [8, 9]), ([4, 5], [6])]]
        mbs = [pair_microbatches(s, max_tokens=4096, pad_id=pad) for s in shares]
        total = sum(mb.num_tokens for share in mbs for mb in share)
        plans = [RankPlan({"check": [OptimizerStep(share, total)]}) for share in mbs]
    plan = scatter_plans(plans, env.rank, env.world_size)
    metrics = backend.train_step(plan.steps["check"][0].micro_batches, plan.steps["check"][0].total_tokens)
    mine = torch.tensor(
        [weights_checksum(backend.export_weights())], dtype=torch.int64, device=collective_device(device)
    )
    every = [torch.zeros_like(mine) for _ in range(env.world_size)]
    dist.all_gather(every, mine)
    sums = [int(t.item()) for t in every]
    print(
        f"rank {env.rank} on {device}: loss {metrics['loss']:.5f}, grad_norm {metrics['grad_norm']:.5f}, checksums {sums}"
    )
    dist.destroy_process_group()
    return 0 if len(set(sums)) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
