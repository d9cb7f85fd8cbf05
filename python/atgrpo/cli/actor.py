"""`atgrpo-actor`: connect to a hub and roll out work units until the hub says shut down."""

from __future__ import annotations

import sys

from atgrpo.cli.common import config_parser, load_run_config, setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("atgrpo-actor", "Roll out AT-GRPO work units for a learner hub.")
    parser.add_argument("--address", required=True, help="hub endpoint: tcp://host:port or ipc:///path")
    parser.add_argument("--id", default=None, help="actor id (default: host and pid)")
    args = parser.parse_args(argv)
    cfg = load_run_config(args)
    log = setup_logging("actor")
    from atgrpo.actor.actor import Actor, ActorError, configure_threads
    from atgrpo.transport.errors import TransportError

    from atgrpo.errors import PlacementError
    from atgrpo.placement import pin

    try:
        pin(cfg.launch.actor_cpus, "launch.actor_cpus")
    except PlacementError as exc:
        log.error("%s", exc)
        return 2
    configure_threads(cfg.launch.actor_threads)
    try:
        units = Actor(cfg, args.address, args.id).run()
    except (ActorError, TransportError) as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:
        return 130
    log.info("done after %d units", units)
    return 0


if __name__ == "__main__":
    sys.exit(main())
