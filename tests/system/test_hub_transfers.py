"""Leases while weights travel: a unit stays leased to an actor that is still receiving weights and
receives them steadily, however long the whole transfer takes, and is taken back from one that
stops taking them in. The actor here is a bare DEALER that reads the reply slowly (libzmq reads
ahead one message, then the socket pushes back, so the hub's chunk trackers follow its reading).
Fixtures and helpers are those of test_hub.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import torch
import zmq
from test_hub import connect, env_results, make_hub, take_unit, unit_samples  # noqa: F401  (fixtures)

from atgrpo.learner.hub import Hub
from atgrpo.learner.hub_weights import Transfers, WeightsCache
from atgrpo.messages import (
    PROTOCOL_VERSION,
    Hello,
    Refused,
    SampleAck,
    SampleBatch,
    WeightsRequest,
    Welcome,
    WorkRequest,
    WorkUnit,
)
from atgrpo.transport.codec import decode, encode

LEASE_S = 0.6
READ_GAP_S = 0.3
"""The slow actor takes one chunk per gap: within the lease, while 6 of them are three leases."""
CHUNKS = 6
BIG = {f"t{i}": torch.full((4 << 20,), i, dtype=torch.uint8) for i in range(CHUNKS)}  # 4 MiB a chunk


class SlowActor:
    """An actor on a bare DEALER whose libzmq reads ahead at most one message."""

    def __init__(self, address: str, actor_id: str = "slow") -> None:
        self.actor_id = actor_id
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVHWM, 1)
        self.sock.setsockopt(zmq.RCVBUF, 64 * 1024)
        self.sock.connect(address)

    def recv(self) -> list[zmq.Frame]:
        assert self.sock.poll(5000, zmq.POLLIN), "no reply from the hub"
        return self.sock.recv_multipart(copy=False)

    def request(self, msg):
        self.sock.send(encode(msg))
        return decode(self.recv()[0].buffer, max_bytes=1 << 24)

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
def slow_actor() -> Iterator[list[SlowActor]]:
    made: list[SlowActor] = []
    yield made
    for actor in made:
        actor.close()


def _leased_unit(hub: Hub, actor: SlowActor) -> WorkUnit:
    assert isinstance(actor.request(Hello(PROTOCOL_VERSION, actor.actor_id, "hub-test", ["shared"])), Welcome)
    hub.open_round(0, [10, 11], 2, split="train", greedy=False)
    unit = actor.request(WorkRequest(actor.actor_id))
    assert isinstance(unit, WorkUnit)
    return unit


def test_a_unit_stays_leased_while_its_weights_arrive_slowly_but_steadily(make_hub, slow_actor) -> None:  # noqa: F811
    hub = make_hub(unit_timeout_s=LEASE_S)
    hub.publish("shared", 0, BIG)
    actor = SlowActor(hub.endpoint.address)
    slow_actor.append(actor)
    unit = _leased_unit(hub, actor)
    start = time.monotonic()
    actor.sock.send(encode(WeightsRequest(actor.actor_id, "shared", 0)))
    for _ in range(CHUNKS):
        time.sleep(READ_GAP_S)
        actor.recv()
    assert time.monotonic() - start > 2 * LEASE_S  # a lease over the whole transfer would have expired
    samples = unit_samples(unit, tag=1)
    ack = actor.request(SampleBatch(actor.actor_id, unit.unit_id, samples, last=True, env_results=env_results(unit)))
    assert ack == SampleAck(unit.unit_id, accepted=len(samples), rejected=0)
    assert hub.metrics().get("hub/units_reassigned", 0.0) == 0.0
    assert len(hub.wait_round(stall_timeout_s=5.0).samples) == len(samples)


def test_a_unit_is_taken_back_from_an_actor_that_stops_taking_its_weights_in(make_hub, slow_actor, connect) -> None:  # noqa: F811
    hub = make_hub(unit_timeout_s=LEASE_S)
    hub.publish("shared", 0, BIG)
    actor = SlowActor(hub.endpoint.address)
    slow_actor.append(actor)
    unit = _leased_unit(hub, actor)
    actor.sock.send(encode(WeightsRequest(actor.actor_id, "shared", 0)))
    actor.recv()  # one chunk, then it stalls with the rest on its way
    other = connect(hub, "b")
    other.request(Hello(PROTOCOL_VERSION, "b", "hub-test", ["shared"]))
    start = time.monotonic()
    again = take_unit(other, timeout_s=5 * LEASE_S)
    assert again.unit_id == unit.unit_id and time.monotonic() - start > LEASE_S / 2
    assert hub.metrics()["hub/units_reassigned"] == 1.0
    for _ in range(CHUNKS - 1):  # the rest of the reply still comes; then its late batch is refused
        actor.recv()
    late = actor.request(SampleBatch(actor.actor_id, unit.unit_id, [], last=True, env_results=env_results(unit)))
    assert isinstance(late, Refused) and "not leased" in late.reason


class FakeTracker:
    def __init__(self) -> None:
        self.done = False


def test_transfers_report_each_peer_once_per_move_and_end_when_every_chunk_left() -> None:
    transfers = Transfers()
    a, b = [FakeTracker() for _ in range(3)], [FakeTracker()]
    transfers.start(b"a", a)  # type: ignore[arg-type]
    transfers.start(b"b", b)  # type: ignore[arg-type]
    assert transfers.progressed() == [] and len(transfers) == 2
    a[1].done = True  # chunks leave in order: chunk 1 alone is not progress yet
    assert transfers.progressed() == []
    a[0].done = b[0].done = True
    assert sorted(transfers.progressed()) == [b"a", b"b"] and len(transfers) == 1  # b is over
    assert transfers.progressed() == []
    a[2].done = True
    assert transfers.progressed() == [b"a"] and len(transfers) == 0


def test_the_cache_keeps_the_newest_versions_and_names_what_it_holds() -> None:
    cache = WeightsCache(keep_versions=2)
    assert cache.reply(WeightsRequest("x", "p", -1)) == Refused("no weights published for policy 'p'")
    for v in range(4):
        cache.put("p", v, [[f"v{v}"]])
    assert cache.reply(WeightsRequest("x", "p", -1)) == [["v3"]]
    assert cache.reply(WeightsRequest("x", "p", 2)) == [["v2"]]
    assert cache.reply(WeightsRequest("x", "p", 1)) == Refused("policy 'p' v1 is not held (have [2, 3])")
