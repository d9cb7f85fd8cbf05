"""`atgrpo-learner`: the learner job (rank 0 is the hub). Single process, or under torchrun/deepspeed.

Stdout carries the job's events, one JSON object per line (`messages.LearnerEvent`: `hub_ready`
with the address actors connect to, warm-start progress, evaluations, `finished` with the run's
summary); logs go to stderr. SIGINT/SIGTERM stop training after the current step: a checkpoint is
written, the final evaluation runs, actors are told to shut down.

Exit status 2, with one line naming the error: an address no socket could use, a tcp address other
hosts reach without CURVE keys, a key folder that does not hold the hub's keys, a
`policies.<p>.path` that is no model folder (`learner.preflight`, checked before torch is imported
and the warm start runs); a checkpoint that cannot be written; a resume with a changed config.
"""

from __future__ import annotations

import os
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
    from atgrpo.errors import (
        AddressError,
        CheckpointWriteError,
        ConfigChangedError,
        CurveKeyError,
        InsecureEndpointError,
        ModelFolderError,
        PlacementError,
    )
    from atgrpo.learner.preflight import check_learner_inputs

    reported = (
        AddressError,
        CheckpointWriteError,
        ConfigChangedError,
        CurveKeyError,
        InsecureEndpointError,
        ModelFolderError,
        PlacementError,
    )
    try:
        # Before the imports below (torch, transformers: seconds) and the warm start (minutes).
        check_learner_inputs(cfg, args.address, hub=os.environ.get("RANK", "0") == "0")
    except reported as exc:
        import msgspec

        from atgrpo.messages import Failed

        # The event run_learner sends when it fails: a launcher shows it as the learner's error.
        sys.stdout.write(msgspec.json.encode(Failed(f"{type(exc).__name__}: {exc}")).decode() + "\n")
        sys.stdout.flush()
        print(f"atgrpo-learner: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    from atgrpo.learner.job import run_learner
    from atgrpo.warmstart.prepare import prepare_models

    try:
        run_learner(cfg, args.address, prepare=prepare_models)
    except reported as exc:
        print(f"atgrpo-learner: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
