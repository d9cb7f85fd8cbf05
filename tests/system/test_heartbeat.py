"""Units longer than their lease: an actor's progress reports (`UnitProgress`, one after a generate
call) keep a slow unit leased for as long as its generate calls keep finishing; an actor that stops
reporting loses the unit after `transport.unit_timeout_s`; a report for a unit the sender does not
hold is refused, counted, and extends no lease.

The actor tests run a real `Actor` (tiny model, torch engine) whose engine is slowed down so that a
greedy (evaluation) unit, which streams no samples, takes several times its lease. The engine runs
on `ATGRPO_TEST_DEVICE` (default cpu; a GPU check sets cuda).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from systest_util import tiny_sets
from test_hub import RUN, connect, finish, hello, make_hub, take_unit  # noqa: F401  (fixtures)

from atgrpo.actor import actor as actor_module
from atgrpo.actor.actor import Actor
from atgrpo.config import load_config
from atgrpo.learner.hub import Hub
from atgrpo.learner.ledger import VersionLedger
from atgrpo.messages import NoWork, ProgressAck, Refused, UnitProgress, WorkRequest, WorkUnit
from atgrpo.models.folder import load_model
from atgrpo.models.tiny import build_tiny_model
from atgrpo.paths import policy_dir
from atgrpo.transport import HubEndpoint, private_ipc_address

LEASE_S = 2.0
DEVICE = os.environ.get("ATGRPO_TEST_DEVICE", "cpu")
CALL_S = 0.6
"""Each slowed generate call: well within the lease (even on a loaded machine), while a unit's calls
(up to 2 roles x 6 turns) add up to several leases."""


# -- the hub's side ------------------------------------------------------------------------------


@pytest.mark.integration
def test_progress_renews_only_the_holders_lease(make_hub, connect) -> None:  # noqa: F811
    hub = make_hub(unit_timeout_s=LEASE_S)
    a, b = connect(hub, "a"), connect(hub, "b")
    hello(a), hello(b)
    hub.open_round(0, [10, 11], 2, split="eval", greedy=True)
    unit = take_unit(a)
    # `b` claims `a`'s id for `a`'s unit from its own connection, and its own id: both refused.
    assert isinstance(b.request(UnitProgress("a", unit.unit_id)), Refused)
    assert isinstance(b.request(UnitProgress("b", unit.unit_id)), Refused)
    assert isinstance(a.request(UnitProgress("a", unit.unit_id + 99)), Refused)  # a unit nobody holds
    assert hub.metrics()["hub/progress_refused"] == 3.0
    # `a` reports for three leases' time: its unit stays leased to it all along.
    end = time.monotonic() + 3 * LEASE_S
    while time.monotonic() < end:
        assert a.request(UnitProgress("a", unit.unit_id)) == ProgressAck(unit.unit_id)
        reply = b.request(WorkRequest("b"))
        assert isinstance(reply, NoWork), reply
        time.sleep(LEASE_S / 4)
    assert hub.metrics().get("hub/units_reassigned", 0.0) == 0.0
    # Only `b` reports now (refused each time): that keeps nothing alive, and `b` gets the unit.
    deadline = time.monotonic() + 10 * LEASE_S
    got = None
    while got is None and time.monotonic() < deadline:
        assert isinstance(b.request(UnitProgress("a", unit.unit_id)), Refused)
        reply = b.request(WorkRequest("b"))
        got = reply if isinstance(reply, WorkUnit) else None
        time.sleep(LEASE_S / 4)
    assert got is not None and got.unit_id == unit.unit_id
    assert hub.metrics()["hub/units_reassigned"] == 1.0
    # `a`'s next report learns that the unit is gone.
    assert isinstance(a.request(UnitProgress("a", unit.unit_id)), Refused)


def test_a_round_clock_bounds_the_wait_whatever_the_progress(make_hub, connect) -> None:  # noqa: F811
    """`transport.round_timeout_s`: progress renews the stall clock, never the round's own."""
    hub = make_hub(unit_timeout_s=LEASE_S)
    a = connect(hub, "a")
    hello(a)
    hub.open_round(3, [10, 11], 2, split="train", greedy=False)
    unit = take_unit(a)
    stop = threading.Event()

    def report() -> None:
        while not stop.is_set():
            a.request(UnitProgress("a", unit.unit_id))
            time.sleep(0.1)

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    try:
        with pytest.raises(TimeoutError) as info:
            hub.wait_round(stall_timeout_s=60.0, round_timeout_s=1.0, poll_s=0.05)
    finally:
        stop.set()
        reporter.join(timeout=5)
    text = str(info.value)
    assert "step 3" in text and "transport.round_timeout_s" in text and "1 leased" in text


# -- a real actor ----------------------------------------------------------------------------------


def _slow_engines(monkeypatch) -> list[float]:
    """Every engine the actor opens sleeps `CALL_S` in each generate call; returns the calls' end times."""
    ends: list[float] = []
    real = actor_module.make_engines

    def make_engines(cfg, policies):
        handles = real(cfg, policies)
        for h in handles.values():
            generate = h.engine.generate

            def slow(prompts, params, seed=None, _generate=generate):
                time.sleep(CALL_S)
                out = _generate(prompts, params, seed=seed)
                ends.append(time.monotonic())
                return out

            h.engine.generate = slow
        return handles

    monkeypatch.setattr(actor_module, "make_engines", make_engines)
    return ends


def _hub_and_actor(tmp_path: Path) -> tuple[Hub, Actor]:
    cfg = load_config(
        None,
        tiny_sets(
            tmp_path,
            task__turns=6,
            transport__request_timeout_s=10,
            transport__unit_timeout_s=LEASE_S,
            rollout__device=repr(DEVICE),
        ),
    )
    build_tiny_model(cfg.policies["shared"].tiny, policy_dir(cfg, "shared"))
    hub = Hub(
        HubEndpoint(private_ipc_address(tmp_path / "ipc")),
        VersionLedger(cfg.run.name, {"shared": 0}),
        unit_timeout_s=LEASE_S,
        retry_after_s=0.01,
    )
    hub.start()
    hub.publish("shared", 0, load_model(policy_dir(cfg, "shared")).state_dict())
    return hub, Actor(cfg, hub.endpoint.address, "steady")


def _run_in_thread(actor: Actor, max_units: int) -> list:
    result: list = []

    def run() -> None:
        try:
            result.append(actor.run(max_units=max_units))
        except Exception as exc:  # reported through the result list
            result.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120.0)
    return result


@pytest.mark.integration
def test_an_evaluation_unit_longer_than_its_lease_keeps_it_while_it_reports(tmp_path: Path, monkeypatch) -> None:
    ends = _slow_engines(monkeypatch)
    hub, actor = _hub_and_actor(tmp_path)
    try:
        hub.open_round(-1, [0, 1], 2, split="eval", greedy=True)
        assert _run_in_thread(actor, 1) == [1]
        data = hub.wait_round(stall_timeout_s=5.0)
        assert [e.env for e in data.envs] == [0, 1]
        assert ends[-1] - ends[0] > 1.5 * LEASE_S, ends  # the unit outlived its lease
        print(f"{len(ends)} generate calls over {ends[-1] - ends[0]:.1f} s, lease {LEASE_S} s")
        m = hub.metrics()
        assert m.get("hub/units_reassigned", 0.0) == 0.0 and m["hub/units_assigned"] == 1.0
        assert m["hub/progress_reports"] >= 2.0 and "hub/progress_refused" not in m
        assert actor.units_lost == 0
    finally:
        actor.client.close()
        hub.stop("test over", drain_s=0.0)


@pytest.mark.integration
def test_an_actor_that_stops_reporting_loses_its_unit(tmp_path: Path, monkeypatch) -> None:
    _slow_engines(monkeypatch)
    hub, actor = _hub_and_actor(tmp_path)
    tries: list[int] = []
    real_heartbeat = actor._heartbeat

    def heartbeat(unit) -> None:
        if len(tries) == 1:  # silent on its first try at the unit, as a stalled actor is
            return
        real_heartbeat(unit)

    real_do_unit = actor._do_unit

    def do_unit(unit) -> None:
        tries.append(unit.unit_id)
        real_do_unit(unit)

    actor._heartbeat = heartbeat
    actor._do_unit = do_unit
    try:
        hub.open_round(-1, [0, 1], 2, split="eval", greedy=True)
        assert _run_in_thread(actor, 1) == [1]  # done on the second try, reporting
        data = hub.wait_round(stall_timeout_s=5.0)
        assert [e.env for e in data.envs] == [0, 1]
        assert tries == [0, 0]
        m = hub.metrics()
        assert m["hub/units_reassigned"] == 1.0 and m["hub/units_assigned"] == 2.0
        assert actor.units_lost == 1
    finally:
        actor.client.close()
        hub.stop("test over", drain_s=0.0)
