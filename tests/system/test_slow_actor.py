"""A real `Actor` (tiny model, torch engine) against an in-process hub: an actor that is merely slow
loses its unit when the lease expires, its late batch is refused, and it carries on with the next
unit instead of dying."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from systest_util import tiny_sets

from atgrpo.actor.actor import Actor
from atgrpo.config import load_config
from atgrpo.learner.hub import Hub
from atgrpo.learner.ledger import VersionLedger
from atgrpo.models.folder import load_model
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import policy_dir
from atgrpo.transport import HubEndpoint, private_ipc_address

UNIT_TIMEOUT_S = 1.0


def test_a_slow_actor_drops_its_expired_unit_and_carries_on(tmp_path: Path) -> None:
    cfg = load_config(
        None,
        tiny_sets(
            tmp_path,
            rollout__k=2,
            task__turns=1,
            transport__request_timeout_s=10,
            transport__unit_timeout_s=UNIT_TIMEOUT_S,
        ),
    )
    build_tiny_model(cfg.policies["shared"].tiny, policy_dir(cfg, "shared"))
    hub = Hub(
        HubEndpoint(private_ipc_address(tmp_path / "ipc")),
        VersionLedger(cfg.run.name, {"shared": 0}),
        unit_timeout_s=UNIT_TIMEOUT_S,
        retry_after_s=0.01,
    )
    hub.start()
    actor = None
    try:
        hub.publish("shared", 0, load_model(policy_dir(cfg, "shared")).state_dict())
        hub.open_round(0, [0, 1], 2, split="train", greedy=False)
        actor = Actor(cfg, hub.endpoint.address, "slowpoke")
        real_stream = actor._stream
        stalls = []

        def stream(unit, samples, last, **extra):
            if not stalls:  # the first group of the first unit: stall past the lease
                stalls.append(unit.unit_id)
                time.sleep(UNIT_TIMEOUT_S + 0.5)
            return real_stream(unit, samples, last, **extra)

        actor._stream = stream
        result: list = []
        worker = threading.Thread(target=lambda: result.append(_run(actor, max_units=1)), daemon=True)
        worker.start()
        worker.join(timeout=60.0)
        assert result == [1], result  # the actor lived to finish the unit on its second try
        data = hub.wait_round(stall_timeout_s=5.0)
        assert data.samples and all(s.version == 0 for s in data.samples)
        assert [e.env for e in data.envs] == [0, 1]
        m = hub.metrics()
        assert m["hub/units_reassigned"] == 1.0 and m["hub/orphan_batches"] == 1.0
        assert m["hub/units_assigned"] == 2.0  # the same unit, handed out twice
    finally:
        if actor is not None:
            actor.client.close()
        hub.stop("test over", drain_s=0.0)


def _run(actor: Actor, max_units: int):
    try:
        return actor.run(max_units=max_units)
    except Exception as exc:  # reported through the result list
        return exc
