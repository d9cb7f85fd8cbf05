"""`atgrpo-learner`: the learner job (rank 0 is the hub). Single process, or under torchrun/deepspeed.

Prints the hub address on stdout as `ATGRPO_HUB <address>` once actors can connect, and a final
`ATGRPO_RESULT <json>` line with the evaluation summary. SIGINT/SIGTERM stop training after the
current step: a checkpoint is written, the final evaluation runs, actors are told to shut down.
"""

from __future__ import annotations

import json
import signal
import sys
import threading

import torch

from atgrpo.cli.common import config_parser, load_run_config, setup_logging
from atgrpo.paths import out_dir


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("atgrpo-learner", "Train the run's policies; rank 0 serves actors over ZeroMQ.")
    parser.add_argument("--address", default=None, help="hub endpoint (default: transport.endpoint or a private ipc socket)")
    args = parser.parse_args(argv)
    cfg = load_run_config(args)
    log = setup_logging("learner")
    if cfg.launch.learner_threads:
        torch.set_num_threads(cfg.launch.learner_threads)
    torch.manual_seed(cfg.run.seed)

    from atgrpo.learner import distributed
    from atgrpo.learner.hub import Hub
    from atgrpo.learner.ledger import VersionLedger
    from atgrpo.learner.trainer import Trainer, prepare_models
    from atgrpo.metrics import plot_learning_curve
    from atgrpo.transport.endpoints import HubEndpoint, private_ipc_address

    world = 1
    rank = 0
    if distributed.launched() or cfg.train.backend == "deepspeed":
        env = distributed.init_distributed_from_env(timeout_s=cfg.transport.step_timeout_s)
        rank, world = env.rank, env.world_size
    out_dir(cfg).mkdir(parents=True, exist_ok=True)
    if rank == 0:
        prepare_models(cfg, log_fn=log.info)
    if world > 1:
        torch.distributed.barrier()

    stop = threading.Event()

    def on_signal(signum, _frame):
        log.warning("signal %d: stopping after the current step", signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    hub = None
    if rank == 0:
        address = args.address or cfg.transport.endpoint or private_ipc_address(out_dir(cfg) / "ipc")
        endpoint = HubEndpoint(address, max_message_bytes=cfg.transport.max_message_bytes)
        ledger = VersionLedger(cfg.run.name, {p: 0 for p in cfg.policies}, cfg.train.max_staleness)
        hub = Hub(endpoint, ledger, unit_timeout_s=cfg.transport.unit_timeout_s, keep_versions=cfg.train.max_staleness + 1)
    trainer = Trainer(cfg, hub, rank, world)
    trainer.try_resume()
    if hub is not None:
        hub.ledger.versions.update(trainer.versions)
        hub.start()
        print(f"ATGRPO_HUB {hub.endpoint.address}", flush=True)
    try:
        summary = trainer.run(stop_requested=stop.is_set)
    finally:
        if hub is not None:
            hub.stop("training finished")
    if rank == 0:
        metrics_file = out_dir(cfg) / "metrics.jsonl"
        png = plot_learning_curve(metrics_file, out_dir(cfg) / "learning_curve.png", title=cfg.run.name)
        summary["learning_curve"] = str(png)
        start, end = summary.get("eval_start"), summary.get("eval_end")
        if start is not None and end is not None:
            summary["improvement_points"] = round(100 * (end - start), 1)
            log.info("held-out success: %.1f%% -> %.1f%% (%+.1f points)", 100 * start, 100 * end, 100 * (end - start))
        (out_dir(cfg) / "eval.json").write_text(json.dumps(summary, indent=2))
        print("ATGRPO_RESULT " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
