"""`atgrpo-learner`: the learner job (rank 0 is the hub). Single process, or under torchrun/deepspeed.

Stdout carries the job's events, one JSON object per line (`messages.LearnerEvent`: `hub_ready`
with the address actors connect to, warm-start progress, evaluations, `finished` with the run's
summary); logs go to stderr. SIGINT/SIGTERM stop training after the current step: a checkpoint is
written, the final evaluation runs, actors are told to shut down.
"""

from __future__ import annotations

import sys

from atgrpo.cli.common import config_parser, load_run_config, setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("atgrpo-learner", "Train the run's policies; rank 0 serves actors over ZeroMQ.")
    parser.add_argument(
        "--address", default=None, help="hub endpoint (default: transport.endpoint or a private ipc socket)"
    )
    args = parser.parse_args(argv)
    cfg = load_run_config(args)
    setup_logging("learner")
    from atgrpo.errors import CheckpointWriteError, ConfigChangedError, CurveKeyError, InsecureEndpointError
    from atgrpo.learner.job import run_learner
    from atgrpo.warmstart.prepare import prepare_models

    try:
        run_learner(cfg, args.address, prepare=prepare_models)
    except (CheckpointWriteError, ConfigChangedError, CurveKeyError, InsecureEndpointError) as exc:
        print(f"atgrpo-learner: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
