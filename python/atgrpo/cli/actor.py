"""`atgrpo-actor`: connect to a hub and roll out work units until the hub says shut down."""

from __future__ import annotations

import sys

from atgrpo.cli.common import config_parser, load_run_config, setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("atgrpo-actor", "Roll out AT-GRPO work units for a learner hub.")
    parser.add_argument(
        "--address",
        required=True,
        help="hub endpoint: tcp://host:port or ipc:///path; '-': the first line of stdin, once the hub is up",
    )
    parser.add_argument("--id", default=None, help="actor id (default: host and pid)")
    args = parser.parse_args(argv)
    cfg = load_run_config(args)
    log = setup_logging("actor")
    from atgrpo.actor.actor import Actor, ActorError, configure_threads
    from atgrpo.errors import PlacementError
    from atgrpo.placement import pin
    from atgrpo.transport.errors import TransportError

    try:
        pin(cfg.launch.actor_cpus, "launch.actor_cpus")
    except PlacementError as exc:
        log.error("%s", exc)
        return 2
    configure_threads(cfg.launch.actor_threads)
    # "-": `atgrpo-train` started this actor with its learner and writes the hub's address here once
    # the hub is up; reading it only after the imports above is what lets the two start together.
    address = args.address if args.address != "-" else sys.stdin.readline().strip()
    if not address:
        log.error("stdin closed before the hub's address came (the launcher or the learner stopped first)")
        return 2
    try:
        units = Actor(cfg, address, args.id).run()
    except (ActorError, TransportError) as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        return 130
    log.info("done after %d units", units)
    return 0


if __name__ == "__main__":
    sys.exit(main())
