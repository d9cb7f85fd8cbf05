"""Runs the real `atgrpo-actor` (`atgrpo.cli.actor.main`) with one test hook, for test_actor_death.

python actor_harness.py freeze MARKER <atgrpo-actor args>
    In its first training unit, right after the hub acknowledged the first streamed group (so
    the unit is leased to it and samples are staged on the hub), write MARKER
    ("<unit_id> <step> <env_offset>") and hang until killed.
python actor_harness.py freeze-weights MARKER <atgrpo-actor args>
    At its first request for weights of version >= 1 (a publish after step 0), send the request,
    wait until the hub's reply starts to arrive, write MARKER ("<version>") and hang until
    killed, with the weights on the wire.
python actor_harness.py after MARKER <atgrpo-actor args>
    Import everything, wait until MARKER exists, then run as a plain actor (it joins only once
    the other actor holds a unit, so which actor does what is deterministic).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from atgrpo.actor import actor as actor_module
from atgrpo.cli import actor as actor_cli


def freeze_in_first_unit(marker: Path) -> None:
    original = actor_module.Actor._stream

    def stream(self, unit, samples, last, **extra):
        original(self, unit, samples, last, **extra)
        if not unit.greedy and not last:
            marker.write_text(f"{unit.unit_id} {unit.step} {unit.env_offset}\n")
            while True:  # holds the lease, its staged samples on the hub, until SIGKILL
                time.sleep(60)

    actor_module.Actor._stream = stream


def freeze_in_weight_transfer(marker: Path) -> None:
    import zmq

    from atgrpo.messages import WeightsRequest
    from atgrpo.transport import codec, endpoints

    original = endpoints.ActorClient._exchange

    def exchange(self, msg, timeout_s, **kwargs):
        if not (isinstance(msg, WeightsRequest) and msg.version >= 1):
            return original(self, msg, timeout_s, **kwargs)
        self._sock.send(codec.encode(msg))
        self._sock.poll(60_000, zmq.POLLIN)  # the first frame of the reply is here
        marker.write_text(f"{msg.version}\n")
        while True:  # holds its unit's lease, with the weights unread, until SIGKILL
            time.sleep(60)

    endpoints.ActorClient._exchange = exchange


def main() -> int:
    mode, marker, argv = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    if mode == "freeze":
        freeze_in_first_unit(marker)
    elif mode == "freeze-weights":
        freeze_in_weight_transfer(marker)
    elif mode == "after":
        deadline = time.monotonic() + 300
        while not marker.exists():
            if time.monotonic() > deadline:
                return 3
            time.sleep(0.05)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return actor_cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
