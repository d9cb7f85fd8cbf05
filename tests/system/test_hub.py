"""The hub in-process: a real `HubEndpoint` on a private ipc socket, the `Hub` serve thread, and
`ActorClient`s speaking raw protocol messages (no model, no engine).

Covers the handshake, units, leases and reassignment of a silent actor's unit (its staged samples
dropped, its late batches refused), the version check on intake, the intake checks (a hostile peer's
units refused and the peer cut off while an honest one completes the step; an over-budget group
dropped whole), weights serving, bad frames, and the stall timeout of `wait_round`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
import torch
import zmq

from atgrpo.learner.hub import Hub
from atgrpo.learner.intake import IntakeLimits, PolicyLimits
from atgrpo.learner.ledger import VersionLedger
from atgrpo.messages import (
    PROTOCOL_VERSION,
    EnvResult,
    GroupKey,
    Hello,
    Message,
    NoWork,
    Refused,
    Sample,
    SampleAck,
    SampleBatch,
    Shutdown,
    UnitTimings,
    WeightsRequest,
    Welcome,
    WorkRequest,
    WorkUnit,
)
from atgrpo.transport import ActorClient, HubEndpoint, private_ipc_address
from atgrpo.transport.codec import decode, encode
from atgrpo.transport.errors import UnexpectedReply

RUN = "hub-test"
K = 2
"""Samples per env in these tests (one per branch)."""
VOCAB = 100
LIMITS = IntakeLimits(
    roles=("tool", "plan"),
    role_policy={"tool": "shared", "plan": "shared"},
    policies={"shared": PolicyLimits(VOCAB, context_length=64)},
    turns=4,
    k=K,
    tree=True,
    trajectory=False,
    max_new_tokens=8,
    micro_batch_tokens=32,
)
"""Tree sampling, K branches; the samples of `unit_samples` are one "plan" group per env."""


@pytest.fixture
def make_hub(tmp_path: Path) -> Iterator[Callable[..., Hub]]:
    hubs: list[Hub] = []

    def make(
        versions: dict[str, int] | None = None,
        *,
        unit_timeout_s: float = 30.0,
        max_staleness: int = 0,
        keep_versions: int = 1,
        max_refused_units: int = 3,
    ) -> Hub:
        endpoint = HubEndpoint(private_ipc_address(tmp_path / f"ipc{len(hubs)}"))
        ledger = VersionLedger(RUN, versions or {"shared": 0}, max_staleness)
        hub = Hub(
            endpoint,
            ledger,
            limits=LIMITS,
            unit_timeout_s=unit_timeout_s,
            keep_versions=keep_versions,
            retry_after_s=0.01,
            max_refused_units=max_refused_units,
        )
        hub.start()
        hubs.append(hub)
        return hub

    yield make
    for hub in hubs:
        hub.stop("test over", drain_s=0.0)
        assert hub._error is None, f"hub thread failed: {hub._error!r}"
        assert "hub/handler_errors" not in hub.metrics(), "a message tripped the hub"


@pytest.fixture
def connect() -> Iterator[Callable[[Hub, str], ActorClient]]:
    clients: list[ActorClient] = []

    def make(hub: Hub, actor_id: str) -> ActorClient:
        client = ActorClient(hub.endpoint.address, actor_id, timeout_s=5.0)
        clients.append(client)
        return client

    yield make
    for c in clients:
        c.close()


def hello(client: ActorClient, run_id: str = RUN) -> Message:
    return client.request(Hello(PROTOCOL_VERSION, client.actor_id, run_id, ["shared"]))


def take_unit(client: ActorClient, timeout_s: float = 5.0) -> WorkUnit:
    """Ask for work until a unit comes (NoWork means: ask again)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reply = client.request(WorkRequest(client.actor_id))
        if isinstance(reply, WorkUnit):
            return reply
        assert isinstance(reply, NoWork), reply
        time.sleep(reply.retry_after_s)
    raise AssertionError(f"{client.actor_id}: no unit within {timeout_s} s")


def unit_samples(unit: WorkUnit, tag: int, *, version: int | None = None, policy: str = "shared") -> list[Sample]:
    """K samples per env of `unit`; `tag` is written into the response ids so we can tell who made them."""
    v = unit.versions[policy] if version is None else version
    return [
        Sample(
            RUN,
            policy,
            v,
            unit.step,
            "plan",
            GroupKey(unit.env_offset + e, 1, 0),
            [7, 8, 9],
            [tag, tag],
            [-0.1, -0.2],
            reward=float(b),
            reward_team=0.0,
            reward_local=float(b),
            branch=b,
        )
        for e in range(len(unit.seeds))
        for b in range(K)
    ]


def env_results(unit: WorkUnit) -> list[EnvResult]:
    return [EnvResult(unit.env_offset + e, False, 4, -1.0) for e in range(len(unit.seeds))]


def finish(client: ActorClient, unit: WorkUnit, tag: int) -> SampleAck:
    """Roll out a unit the way an actor does: one batch per group stream, then the `last` batch."""
    samples = unit_samples(unit, tag)
    acks = [client.request(SampleBatch(client.actor_id, unit.unit_id, samples[:K], last=False))]
    acks.append(client.request(SampleBatch(client.actor_id, unit.unit_id, samples[K:], last=False)))
    acks.append(
        client.request(
            SampleBatch(
                client.actor_id,
                unit.unit_id,
                [],
                last=True,
                env_results=env_results(unit),
                timings=UnitTimings(generate_s=0.5),
            )
        )
    )
    assert all(isinstance(a, SampleAck) and a.rejected == 0 for a in acks), acks
    return acks[-1]


def signature(s: Sample) -> tuple:
    return (s.key.env, s.key.agent, s.key.turn, s.branch, tuple(s.response_ids), s.version)


# -- handshake and units -------------------------------------------------------------------------


def test_hello_welcome_and_wrong_run_refused(make_hub, connect) -> None:
    hub = make_hub({"shared": 4})
    a = connect(hub, "a")
    assert hello(a) == Welcome(run_id=RUN, versions={"shared": 4})
    other = connect(hub, "intruder")
    reply = hello(other, run_id="some-other-run")
    assert isinstance(reply, Refused) and "some-other-run" in reply.reason and RUN in reply.reason
    assert hub.metrics()["hub/refused_other_run"] == 1.0
    # A refused Hello does not break the connection: the hub keeps answering both peers.
    assert isinstance(a.request(WorkRequest("a")), NoWork)
    assert hello(other) == Welcome(run_id=RUN, versions={"shared": 4})


def test_open_round_cuts_seeds_into_units_naming_the_current_versions(make_hub, connect) -> None:
    hub = make_hub({"shared": 2})
    a = connect(hub, "a")
    hello(a)
    nothing = a.request(WorkRequest("a"))
    assert isinstance(nothing, NoWork) and "next step" in nothing.reason
    seeds = [100, 101, 102, 103, 104]
    hub.open_round(3, seeds, 2, split="train", greedy=False)
    clients = [a, connect(hub, "b"), connect(hub, "c")]  # a connection holds one unit at a time
    units = [take_unit(c) for c in clients]
    assert [u.seeds for u in units] == [[100, 101], [102, 103], [104]]
    assert [u.env_offset for u in units] == [0, 2, 4]
    assert len({u.unit_id for u in units}) == 3
    assert all(u.step == 3 and u.split == "train" and not u.greedy and u.versions == {"shared": 2} for u in units)
    leased = connect(hub, "d").request(WorkRequest("d"))
    assert isinstance(leased, NoWork) and "leased" in leased.reason
    with pytest.raises(RuntimeError, match="already open"):
        hub.open_round(3, seeds, 2, split="train", greedy=False)
    for c, u in zip(clients, units):
        finish(c, u, tag=1)
    data = hub.wait_round(stall_timeout_s=5.0)
    assert data.step == 3
    assert len(data.samples) == len(seeds) * K
    assert [e.env for e in data.envs] == list(range(len(seeds)))
    assert hub.metrics()["hub/units_assigned"] == 3.0


def test_a_silent_actors_unit_is_reassigned_and_its_samples_never_count(make_hub, connect) -> None:
    hub = make_hub(unit_timeout_s=1.0)
    a, b = connect(hub, "a"), connect(hub, "b")
    hello(a), hello(b)

    # Reference: the same round done cleanly by one actor.
    hub.open_round(0, [10, 11, 12, 13], 2, split="train", greedy=False)
    for _ in range(2):
        finish(b, take_unit(b), tag=2)
    clean = hub.wait_round(stall_timeout_s=5.0)

    hub.open_round(1, [10, 11, 12, 13], 2, split="train", greedy=False)
    ua = take_unit(a)
    staged = unit_samples(ua, tag=1)
    ack = a.request(SampleBatch("a", ua.unit_id, staged[:K], last=False))
    assert ack == SampleAck(ua.unit_id, accepted=K, rejected=0)  # staged on the hub
    silent_since = time.monotonic()
    # `a` goes silent. `b` does the other unit, then asks until the lease of `a` expires.
    ub = take_unit(b)
    assert ub.unit_id != ua.unit_id
    finish(b, ub, tag=2)
    again = take_unit(b, timeout_s=10.0)
    waited = time.monotonic() - silent_since
    assert again == ua  # the very same unit: id, seeds, offset, versions
    assert 0.5 < waited < 5.0, waited  # not before the lease of `a` (1 s) ran out
    assert hub.metrics()["hub/units_reassigned"] == 1.0
    assert "a" not in hub.actors  # presumed dead

    # `a` wakes up: its batches for the unit are refused, whether `b` is still on it or done.
    late = a.request(SampleBatch("a", ua.unit_id, staged[K:], last=False))
    assert isinstance(late, Refused) and f"unit {ua.unit_id}" in late.reason
    finish(b, again, tag=2)
    late_last = a.request(SampleBatch("a", ua.unit_id, [], last=True, env_results=env_results(ua)))
    assert isinstance(late_last, Refused)
    assert hub.metrics()["hub/orphan_batches"] == 2.0

    data = hub.wait_round(stall_timeout_s=5.0)
    assert len(data.samples) == len(clean.samples) == 4 * K
    assert all(s.response_ids == [2, 2] for s in data.samples), "a sample of the silent actor got in"
    assert [signature(s) for s in data.samples] == [signature(s) for s in clean.samples]
    assert [e.env for e in data.envs] == [0, 1, 2, 3]  # one row per env: none from the late `last`


def test_stale_and_foreign_samples_are_rejected_counted_and_left_out(make_hub, connect) -> None:
    hub = make_hub({"shared": 1, "other": 0})
    a = connect(hub, "a")
    hello(a)
    hub.open_round(0, [5, 6], 2, split="train", greedy=False)
    unit = take_unit(a)
    good = unit_samples(unit, tag=3)
    stale = unit_samples(unit, tag=4, version=0)[:1]
    future = unit_samples(unit, tag=5, version=2)[:1]
    unknown = unit_samples(unit, tag=6, version=0, policy="ghost")[:1]
    foreign = [msgspec.structs.replace(good[0], run_id="another-run", response_ids=[7, 7])]
    batch = [stale[0], good[0], future[0], good[1], unknown[0], foreign[0]]
    ack = a.request(SampleBatch("a", unit.unit_id, batch, last=False))
    assert ack == SampleAck(unit.unit_id, accepted=2, rejected=4)
    ack = a.request(SampleBatch("a", unit.unit_id, good[2:], last=True, env_results=env_results(unit)))
    assert ack == SampleAck(unit.unit_id, accepted=len(good) - 2, rejected=0)
    data = hub.wait_round(stall_timeout_s=5.0)
    assert sorted(map(signature, data.samples)) == sorted(map(signature, good))
    m = hub.metrics()
    assert m["hub/rejected_stale"] == 1.0
    assert m["hub/rejected_future_version"] == 1.0
    assert m["hub/rejected_unknown_policy"] == 1.0
    assert m["hub/rejected_other_run"] == 1.0
    assert m["hub/rejected_total"] == 4.0


def test_a_batch_for_a_unit_never_leased_is_refused(make_hub, connect) -> None:
    hub = make_hub()
    a = connect(hub, "a")
    hello(a)
    reply = a.request(SampleBatch("a", 999, [], last=True))
    assert isinstance(reply, Refused)
    hub.open_round(0, [1], 1, split="train", greedy=False)
    unit = take_unit(a)
    b = connect(hub, "b")
    reply = b.request(SampleBatch("b", unit.unit_id, unit_samples(unit, tag=9), last=True))  # not b's unit
    assert isinstance(reply, Refused)
    assert hub.metrics()["hub/orphan_batches"] == 2.0
    finish(a, unit, tag=1)
    assert all(s.response_ids == [1, 1] for s in hub.wait_round(stall_timeout_s=5.0).samples)


# -- intake checks ------------------------------------------------------------------------------------


def corrupt(samples: list[Sample], i: int, **changes: object) -> list[Sample]:
    return [msgspec.structs.replace(s, **changes) if j == i else s for j, s in enumerate(samples)]


def test_a_hostile_peer_is_refused_and_cut_off_while_an_honest_one_completes_the_step(
    make_hub, connect, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="atgrpo.hub")
    hub = make_hub(max_refused_units=5)
    evil, good = connect(hub, "evil"), connect(hub, "good")
    hello(evil), hello(good)
    hub.open_round(0, [10, 11, 12, 13, 14, 15], 2, split="train", greedy=False)
    first = take_unit(evil)
    # A well-formed first group is staged; the garbage that follows refuses the unit, that group too.
    ok = unit_samples(first, tag=6)
    assert evil.request(SampleBatch("evil", first.unit_id, ok[:K], last=False)) == SampleAck(first.unit_id, K, 0)
    garbage = [
        ("out_of_vocab", lambda g: corrupt(g, 0, prompt_ids=[7, VOCAB + 3, 9])),
        ("logprob_count", lambda g: corrupt(g, 1, logprobs=[-0.1])),
        ("out_of_vocab", lambda g: corrupt(g, 0, response_ids=[-1, 6])),  # again: counted, not logged again
        ("key_outside_unit", lambda g: corrupt(g, 0, key=GroupKey(first.env_offset + 2, 1, 0))),
        ("nonfinite_logprob", lambda g: corrupt(g, 1, logprobs=[math.nan, -0.1])),
    ]
    for n, (reason, spoil) in enumerate(garbage):
        unit = first if n == 0 else take_unit(evil)
        assert unit == first  # a refused unit goes back to the front of the queue
        reply = evil.request(SampleBatch("evil", unit.unit_id, spoil(unit_samples(unit, tag=6)[K:]), last=False))
        assert isinstance(reply, Refused) and f"unit {first.unit_id} refused: {reason}" in reply.reason, reply
    # Cut off after 5 refused units: its connection (whatever id it claims) gets Shutdown / Refused
    # from now on.
    assert "evil" in hub.cut_off and "evil" not in hub.actors
    assert isinstance(evil.request(WorkRequest("evil")), Shutdown)
    late = evil.request(
        SampleBatch("evil", first.unit_id, unit_samples(first, tag=6), last=True, env_results=env_results(first))
    )
    assert isinstance(late, Refused) and "cut off" in late.reason
    assert isinstance(evil.request(WorkRequest("someone-else")), Shutdown)
    assert isinstance(hello(evil), Refused)

    units = []
    for _ in range(3):  # one unit at a time, as an actor runs them
        units.append(take_unit(good))
        finish(good, units[-1], tag=2)
    assert len({u.unit_id for u in units}) == 3 and first.unit_id in {u.unit_id for u in units}
    data = hub.wait_round(stall_timeout_s=5.0)
    assert len(data.samples) == 6 * K and all(s.response_ids == [2, 2] for s in data.samples)
    assert [e.env for e in data.envs] == list(range(6))
    m = hub.metrics()
    assert (
        m["hub/rejected_out_of_vocab"],
        m["hub/rejected_logprob_count"],
        m["hub/rejected_key_outside_unit"],
        m["hub/rejected_nonfinite_logprob"],
        m["hub/rejected_total"],
    ) == (2.0, 1.0, 1.0, 1.0, 5.0)
    assert (m["hub/units_refused"], m["hub/peers_cut_off"], m.get("hub/units_reassigned", 0.0)) == (5.0, 1.0, 0.0)
    assert m["hub/samples_dropped"] == K and m["hub/cut_off_messages"] == 4.0 and m["hub/actors"] == 1.0
    logged = [r.getMessage() for r in caplog.records if r.name == "atgrpo.hub" and "actor evil" in r.getMessage()]
    assert sum("unit refused" in line for line in logged) == 4  # once per (peer, reason)
    assert sum("cut off" in line for line in logged) == 1


def test_an_over_budget_group_is_dropped_whole_and_the_rest_of_the_unit_kept(make_hub, connect) -> None:
    hub = make_hub()
    a = connect(hub, "a")
    hello(a)
    hub.open_round(0, [1, 2], 2, split="train", greedy=False)
    unit = take_unit(a)
    samples = unit_samples(unit, tag=3)
    # 42 tokens: within the model's context (an honest actor can send it), over train.micro_batch_tokens.
    long = msgspec.structs.replace(samples[1], prompt_ids=[7] * 40)
    assert a.request(SampleBatch("a", unit.unit_id, samples[:1], last=False)) == SampleAck(unit.unit_id, 1, 0)
    assert a.request(SampleBatch("a", unit.unit_id, [long], last=False)) == SampleAck(unit.unit_id, 0, 1)
    ack = a.request(SampleBatch("a", unit.unit_id, samples[K:], last=True, env_results=env_results(unit)))
    assert ack == SampleAck(unit.unit_id, K, 0)
    data = hub.wait_round(stall_timeout_s=5.0)
    assert [s.key.env for s in data.samples] == [1] * K  # env 0's group left whole, the sample staged first too
    m = hub.metrics()
    assert (m["hub/rejected_over_budget"], m["hub/samples_dropped"], m["hub/units_refused"]) == (1.0, 2.0, 0.0)
    assert not hub.cut_off


def test_a_unit_is_checked_whole_with_its_last_batch(make_hub, connect) -> None:
    hub = make_hub()
    a = connect(hub, "a")
    hello(a)
    hub.open_round(0, [1, 2], 2, split="train", greedy=False)
    unit = take_unit(a)
    samples = unit_samples(unit, tag=4)
    reply = a.request(SampleBatch("a", unit.unit_id, samples[:-1], last=True, env_results=env_results(unit)))
    assert isinstance(reply, Refused) and "group_incomplete" in reply.reason  # a half group never trains
    unit = take_unit(a)
    reply = a.request(SampleBatch("a", unit.unit_id, samples, last=True, env_results=env_results(unit)[:1]))
    assert isinstance(reply, Refused) and "env_results" in reply.reason
    finish(a, take_unit(a), tag=4)  # two refusals: below the bound, still served
    assert len(hub.wait_round(stall_timeout_s=5.0).samples) == 2 * K
    m = hub.metrics()
    assert (m["hub/rejected_group_incomplete"], m["hub/rejected_env_results"], m["hub/units_refused"]) == (
        1.0,
        1.0,
        2.0,
    )
    assert m["hub/peers_cut_off"] == 0.0


# -- weights ----------------------------------------------------------------------------------------


def test_published_weights_come_back_identical(make_hub, connect) -> None:
    hub = make_hub(keep_versions=2)
    gen = torch.Generator().manual_seed(0)
    v1 = {
        "embed.weight": torch.randn(64, 16, generator=gen),
        "norm.weight": torch.ones(16, dtype=torch.bfloat16),
        "count": torch.tensor([3], dtype=torch.int64),
    }
    v2 = {k: (t * 2 if t.is_floating_point() else t + 1) for k, t in v1.items()}
    hub.publish("shared", 1, v1)
    hub.publish("shared", 2, v2)
    a = connect(hub, "a")
    for version, want in ((1, v1), (2, v2), (-1, v2)):
        header, got = a.request_weights("shared", version)
        assert header.version == (2 if version == -1 else version)
        assert list(got) == list(want)
        for name, t in want.items():
            assert got[name].dtype == t.dtype and torch.equal(got[name], t), name
    hub.publish("shared", 3, v1)  # keep_versions=2: v1 is dropped
    with pytest.raises(UnexpectedReply, match="not held"):
        a.request_weights("shared", 1)
    assert hub.metrics()["hub/weights_served"] == 3.0


def test_weights_of_an_unpublished_policy_are_refused_not_crashed(make_hub, connect) -> None:
    hub = make_hub()
    a = connect(hub, "a")
    with pytest.raises(UnexpectedReply, match="no weights published for policy 'shared'"):
        a.request_weights("shared", 0)
    hub.publish("shared", 0, {"w": torch.zeros(3)})
    with pytest.raises(UnexpectedReply, match="no weights published for policy 'ghost'"):
        a.request_weights("ghost", -1)
    reply = a.request(WeightsRequest("a", "ghost", 0))
    assert isinstance(reply, Refused)
    _, got = a.request_weights("shared", 0)  # the hub still serves
    assert torch.equal(got["w"], torch.zeros(3))
    assert hello(a) == Welcome(RUN, {"shared": 0})


# -- robustness ----------------------------------------------------------------------------------------


def raw_exchange(address: str, frames: list[bytes], timeout_s: float = 5.0) -> Message | None:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(address)
        sock.send_multipart(frames)
        if not sock.poll(round(timeout_s * 1000), zmq.POLLIN):
            return None
        return decode(sock.recv(), max_bytes=1 << 20)
    finally:
        sock.close(linger=0)


def test_malformed_frames_do_not_break_the_hub(make_hub, connect) -> None:
    hub = make_hub()
    address = hub.endpoint.address
    garbage = [
        [b"\xc1\xc1 not msgpack"],
        [b""],
        [encode(WorkRequest("x")), b"a second frame"],
        [msgspec.msgpack.encode({"type": "work_request", "actor_id": 17})],
        [msgspec.msgpack.encode({"type": "launch_missiles"})],
        [encode(Hello(PROTOCOL_VERSION + 1, "old", RUN, []))],
        [encode(Welcome(RUN, {}))],  # well-formed, but hub -> actor only
        [encode(Shutdown("no"))],
    ]
    for frames in garbage:
        reply = raw_exchange(address, frames)
        assert isinstance(reply, Refused), (frames, reply)
    assert hub._thread.is_alive() and hub._error is None
    a = connect(hub, "a")
    assert hello(a) == Welcome(RUN, {"shared": 0})
    hub.open_round(0, [1, 2], 2, split="train", greedy=False)
    finish(a, take_unit(a), tag=1)
    assert len(hub.wait_round(stall_timeout_s=5.0).samples) == 2 * K
    m = hub.metrics()
    assert m["hub/unexpected_kind"] == 2.0
    assert m["transport/rejected_malformed"] == 3.0


def test_wait_round_times_out_naming_what_it_waited_for(make_hub) -> None:
    hub = make_hub()
    with pytest.raises(RuntimeError, match="no round is open"):
        hub.wait_round(stall_timeout_s=0.1)
    hub.open_round(7, [1, 2, 3], 2, split="train", greedy=False)
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        hub.wait_round(stall_timeout_s=0.5, poll_s=0.05)
    assert 0.4 < time.monotonic() - start < 3.0
    text = str(info.value)
    assert "step 7" in text and "2 unfinished units" in text and "0 leased, 2 unassigned" in text
    assert "actors seen: none" in text


def test_stop_tells_waiting_actors_to_shut_down(make_hub, connect) -> None:
    hub = make_hub()
    a = connect(hub, "a")
    hello(a)
    replies: list[Message] = []

    def poll() -> None:
        while True:
            reply = a.request(WorkRequest("a"))
            if isinstance(reply, Shutdown):
                replies.append(reply)
                return
            time.sleep(0.01)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    start = time.monotonic()
    hub.stop("all done", drain_s=5.0)
    t.join(timeout=5.0)
    assert replies == [Shutdown("all done")]
    assert time.monotonic() - start < 4.0  # the only actor left, so the drain ended early


def test_a_connection_holds_one_unit_at_a_time_whatever_id_it_claims(make_hub, connect) -> None:
    hub = make_hub()
    a, b = connect(hub, "a"), connect(hub, "b")
    hub.open_round(0, [1, 2, 3, 4], 2, split="train", greedy=False)
    unit = take_unit(a)
    for claimed in ("a", "b", "someone"):
        reply = a.request(WorkRequest(claimed))
        assert isinstance(reply, NoWork) and f"already holds unit {unit.unit_id}" in reply.reason
    # Another connection claiming a's id can neither take a second unit for it nor send a's samples.
    other = take_unit(b)
    forged = b.request(
        SampleBatch("a", unit.unit_id, unit_samples(unit, tag=6), last=True, env_results=env_results(unit))
    )
    assert isinstance(forged, Refused) and "another connection" in forged.reason
    finish(a, unit, tag=1)
    finish(b, other, tag=2)
    assert len(hub.wait_round(stall_timeout_s=5.0).samples) == 4 * K
    assert hub.metrics()["hub/foreign_batches"] == 1.0
