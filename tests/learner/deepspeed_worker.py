"""One rank of the 2-rank DeepSpeed test; run under `python -m torch.distributed.run`.

For each ZeRO stage asked for: train steps 1-2 on this rank's share (`deepspeed_cases.SHARES`),
export the weights, save a checkpoint, train step 3 ("unstopped"), then build a fresh backend, load
the checkpoint and train step 3 again ("resumed"); then steps 1-2 once more on a third backend, the
share arriving in chunks (`STREAM_CHUNKS`, one `accumulate` each) as a streaming learner gets it. Writes `<out>/stage<S>_rank<R>.pt`; the test
process compares ranks with each other and with a single-process TorchBackend.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from deepspeed_cases import EXTRA_CONFIG, LOSS, LR, SHARES, STREAM_CHUNKS, WEIGHT_DECAY, checksum, from_dicts

from atgrpo.learner.backends.deepspeed_backend import DeepSpeedBackend
from atgrpo.learner.distributed import get_rank, get_world_size, init_distributed_from_env
from atgrpo.models.folder import load_model

TIMEOUT_S = 300.0
"""Process-group timeout: a mismatched collective fails the run instead of hanging it. It also bounds
the first collective, which waits for the slower rank's imports: on two busy cores (the integration
tier's two workers) those took past the 120 s this used to be, failing a correct run."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--case", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--stages", default="1,3")
    args = ap.parse_args()
    torch.set_num_threads(1)
    init_distributed_from_env("gloo", timeout_s=TIMEOUT_S)
    rank, world = get_rank(), get_world_size()
    assert world == 2, world
    case = torch.load(args.case, weights_only=True)
    steps = [from_dicts(s) for s in case["steps"]]
    totals = case["totals"]
    grad_clip = case["grad_clip"]

    def backend(stage: int) -> DeepSpeedBackend:
        return DeepSpeedBackend(
            load_model(args.model),
            lr=LR,
            weight_decay=WEIGHT_DECAY,
            grad_clip=grad_clip,
            loss_cfg=LOSS,
            zero_stage=stage,
            timeout_s=TIMEOUT_S,
            extra_config=EXTRA_CONFIG,
        )

    def share(step: int) -> list:
        return [steps[step][i] for i in SHARES[step][rank]]

    for stage in (int(s) for s in args.stages.split(",")):
        b = backend(stage)
        metrics = [b.train_step(share(i), totals[i]) for i in range(2)]
        weights = b.export_weights()
        ckpt = args.out / f"ckpt_stage{stage}"
        b.save_checkpoint(ckpt)
        metrics.append(b.train_step(share(2), totals[2]))
        unstopped = b.export_weights()
        fresh = backend(stage)
        fresh.load_checkpoint(ckpt)
        resumed_metrics = fresh.train_step(share(2), totals[2])
        resumed = fresh.export_weights()
        streamed = backend(stage)  # steps 1-2 again, each rank's share arriving in chunks
        streamed_metrics = []
        for i, chunks in enumerate(STREAM_CHUNKS):
            for chunk in chunks[rank]:
                streamed.accumulate([steps[i][j] for j in chunk])
            streamed_metrics.append(streamed.finish_step(totals[i]))
        torch.save(
            {
                "metrics": metrics,
                "resumed_metrics": resumed_metrics,
                "weights": weights,
                "checksum": checksum(weights),
                "unstopped": unstopped,
                "resumed": resumed,
                "streamed": streamed.export_weights(),
                "streamed_metrics": streamed_metrics,
            },
            args.out / f"stage{stage}_rank{rank}.pt",
        )
        del b, fresh, streamed
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
