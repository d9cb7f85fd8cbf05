"""The hub under streaming and pipelining: several rounds open, versions named at lease time,
committed units handed over as they come (`take`), and units restored after a restart.
Fixtures and helpers are those of test_hub.py."""

from __future__ import annotations

import msgspec
import torch
from test_hub import K, connect, env_results, finish, hello, make_hub, take_unit, unit_samples  # noqa: F401  (fixtures)

from atgrpo.learner.hub import CommittedUnit
from atgrpo.messages import SampleBatch

WEIGHTS = {"w": torch.zeros(2)}


def test_units_stream_to_the_learner_as_they_commit(make_hub, connect) -> None:  # noqa: F811 (fixtures)
    hub = make_hub()
    a = connect(hub, "a")
    hello(a)
    round_id = hub.open_round(0, [10, 11, 12, 13], 2, split="train", greedy=False)
    first, second = take_unit(a), None
    finish(a, first, tag=1)
    got = hub.take(round_id, stall_timeout_s=5.0)
    assert got is not None and [u.unit.unit_id for u in got] == [first.unit_id]  # before the round is complete
    assert len(got[0].samples) == 2 * K and [e.env for e in got[0].envs] == [0, 1]
    second = take_unit(a)
    # Half a unit is never handed over: a unit whose actor dies is dropped whole, nothing of it trained.
    samples = unit_samples(second, 1)
    assert a.request(SampleBatch("a", second.unit_id, samples[:K], last=False)).accepted == K
    assert hub._rounds[round_id].committed == []
    a.request(SampleBatch("a", second.unit_id, samples[K:], last=False))
    assert a.request(SampleBatch("a", second.unit_id, [], last=True, env_results=env_results(second))).rejected == 0
    rest = hub.take(round_id, stall_timeout_s=5.0)
    assert rest is not None and [u.unit.unit_id for u in rest] == [second.unit_id]
    assert hub.take(round_id, stall_timeout_s=5.0) is None  # every unit taken: the round is closed
    assert round_id not in hub._rounds


def test_pipelined_rounds_name_the_versions_current_at_lease_time(make_hub, connect) -> None:  # noqa: F811 (fixtures)
    hub = make_hub({"shared": 0}, max_staleness=1)
    hub.publish("shared", 0, WEIGHTS)
    a, b = connect(hub, "a"), connect(hub, "b")
    hello(a), hello(b)
    r0 = hub.open_round(0, [1, 2], 2, split="train", greedy=False)
    r1 = hub.open_round(1, [3, 4, 5, 6], 2, split="train", greedy=False)  # step 1 opened ahead
    u0 = take_unit(a)
    assert u0.step == 0  # the oldest step first
    u1 = take_unit(b)
    assert u1.step == 1 and u1.versions == {"shared": 0}  # rolled out while step 0 trains
    finish(a, u0, tag=1)
    assert [u.unit.step for u in hub.take(r0, stall_timeout_s=5.0)] == [0]
    hub.publish("shared", 1, WEIGHTS)  # step 0 trained
    u2 = take_unit(a)
    assert u2.step == 1 and u2.versions == {"shared": 1}  # the newest weights from the next lease on
    finish(b, u1, tag=2), finish(a, u2, tag=1)
    data = hub.wait_round(r1, stall_timeout_s=5.0)
    assert sorted(data.staleness) == [0] * 2 * K + [1] * 2 * K  # u1's samples are one version behind
    assert hub.metrics()["hub/rejected_total"] == 0.0


def test_evaluation_units_go_before_training_units(make_hub, connect) -> None:  # noqa: F811 (fixtures)
    hub = make_hub()
    a = connect(hub, "a")
    hello(a)
    hub.open_round(1, [1, 2], 2, split="train", greedy=False)
    hub.open_round(-1, [0, 1], 2, split="eval", greedy=True)
    assert take_unit(a).split == "eval"


def test_restored_units_are_not_rolled_out_again(make_hub, connect) -> None:  # noqa: F811 (fixtures)
    hub = make_hub()
    a = connect(hub, "a")
    hello(a)
    hub.open_round(0, [10, 11, 12, 13], 2, split="train", greedy=False)
    done = take_unit(a)
    finish(a, done, tag=1)
    saved = hub.untaken()  # what a checkpoint written now keeps
    assert [u.unit.unit_id for u in saved] == [done.unit_id]
    saved = msgspec.msgpack.decode(msgspec.msgpack.encode(saved), type=list[CommittedUnit])  # as a checkpoint has it

    restarted = make_hub()
    b = connect(restarted, "b")
    hello(b)
    r = restarted.open_round(0, [10, 11, 12, 13], 2, split="train", greedy=False, restored=saved)
    other = take_unit(b)
    assert other.env_offset != done.env_offset  # only the unit not in yet is rolled out
    finish(b, other, tag=2)
    data = restarted.wait_round(r, stall_timeout_s=5.0)
    assert sorted(e.env for e in data.envs) == [0, 1, 2, 3]
    assert len(data.samples) == 4 * K and len({(s.key.env, s.branch) for s in data.samples}) == 4 * K
    assert restarted.metrics()["hub/units_restored"] == 1.0


def test_a_unit_older_than_k_when_it_arrives_is_refused_and_counted(make_hub, connect) -> None:  # noqa: F811 (fixtures)
    """An actor that sat on a unit while the learner moved two versions on (k = 1): its samples are
    refused at intake as stale, counted, and the unit is rolled out again with current weights."""
    hub = make_hub({"shared": 0}, max_staleness=1, keep_versions=2)
    hub.publish("shared", 0, WEIGHTS)
    slow, fresh = connect(hub, "slow"), connect(hub, "fresh")
    hello(slow), hello(fresh)
    r = hub.open_round(0, [1, 2], 2, split="train", greedy=False)
    old = take_unit(slow)
    assert old.versions == {"shared": 0}
    hub.publish("shared", 1, WEIGHTS)
    hub.publish("shared", 2, WEIGHTS)
    ack = slow.request(SampleBatch("slow", old.unit_id, unit_samples(old, 1)[:K], last=False))
    assert ack.rejected == K  # two versions behind: more than k
    assert hub.metrics()["hub/rejected_stale"] == K
    # The unit comes back when its lease runs out; here, at once:
    with hub._lock:
        hub._release(hub._rounds[r], old.unit_id)
    again = take_unit(fresh)
    assert again.env_offset == old.env_offset and again.versions == {"shared": 2}
    finish(fresh, again, tag=2)
    data = hub.wait_round(r, stall_timeout_s=5.0)
    assert {s.version for s in data.samples} == {2} and data.staleness == [0] * len(data.samples)
