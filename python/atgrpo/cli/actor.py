"""`atgrpo-actor`: connect to a hub and roll out work units until the hub says shut down."""

from __future__ import annotations

import select
import sys

from atgrpo.cli.common import config_parser, load_run_config, setup_logging

NO_ADDRESS = "stdin closed before the hub's address came (the launcher or the learner stopped first)"


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
    # "-": `atgrpo-train` started this actor with its learner and writes the hub's address here once
    # the hub is up; reading it only after the imports below is what lets the two start together. A
    # stdin that has answered already (closed, or the line is there) is read first, so that a closed
    # one is reported before seconds of imports.
    address = args.address
    if address == "-" and select.select([sys.stdin], [], [], 0)[0]:
        address = sys.stdin.readline().strip()
    if not address:
        log.error(NO_ADDRESS)
        return 2
    from atgrpo.transport import keys
    from atgrpo.transport.errors import TransportError
    from atgrpo.transport.security import check_address, require_keys

    try:  # what Actor() checks too, before the seconds of imports below
        tp = cfg.transport
        if address != "-":
            check_address(address, "actor")
            require_keys(address, tp.curve_keys, tp.insecure, "actor")
        if tp.curve_keys is not None:
            keys.actor_keys(tp.curve_keys, tp.curve_actor)
    except TransportError as exc:
        log.error("%s", exc)
        return 2
    from atgrpo.actor.actor import Actor, ActorError, configure_threads
    from atgrpo.errors import PlacementError
    from atgrpo.placement import pin

    try:
        pin(cfg.launch.actor_cpus, "launch.actor_cpus")
    except PlacementError as exc:
        log.error("%s", exc)
        return 2
    configure_threads(cfg.launch.actor_threads)
    if address == "-":
        address = sys.stdin.readline().strip()
        if not address:
            log.error(NO_ADDRESS)
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
