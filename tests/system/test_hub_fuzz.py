"""10,000 hostile messages against a live hub while an honest actor rolls out a step: nothing the
peers send stops the hub, and the step trains on exactly the honest actor's samples.

The messages (seeded) mix random bytes, truncated and multi-frame encodings, msgpack of unknown
kinds and wrong field types, version-stamped `SampleBatch`es with fuzzed samples (for random units,
for units the hostile peers leased, and claiming the honest actor's id for its leased unit), weight
requests for anything, and `WorkRequest`s that lease units and never finish them. Hostile peers use
many connections, as a peer that gets cut off would.
"""

from __future__ import annotations

import math
import time

import msgspec
import numpy as np
import zmq
from test_hub import RUN, VOCAB, K, connect, env_results, finish, hello, make_hub, take_unit, unit_samples  # noqa: F401 (fixtures)

from atgrpo.messages import (
    PROTOCOL_VERSION,
    GroupKey,
    Hello,
    Sample,
    SampleBatch,
    WeightsRequest,
    WorkRequest,
    WorkUnit,
)
from atgrpo.transport.codec import decode, encode

MESSAGES = 10_000
PER_CONNECTION = 200
HONEST_EVERY = 1_000
"""The honest actor finishes one unit after every this many hostile messages."""


def fuzzed_sample(rng: np.random.Generator, unit: WorkUnit | None) -> Sample:
    env = (unit.env_offset if unit else 0) + int(rng.integers(-2, 4))
    n = int(rng.integers(0, 4))
    pick = lambda *xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    return Sample(
        run_id=pick(RUN, "other-run", ""),
        policy=pick("shared", "nobody", ""),
        version=int(pick(0, 0, 1, -1, 2**40)),
        step=int(pick(0, 0, 3, -1)),
        role=pick("plan", "tool", "x" * 50),
        key=GroupKey(env, int(rng.integers(-1, 3)), int(rng.integers(-1, 6))),
        prompt_ids=[int(pick(7, VOCAB - 1, VOCAB, -5, 2**40)) for _ in range(int(rng.integers(0, 4)))],
        response_ids=[int(pick(3, VOCAB + 9, -1)) for _ in range(n)],
        logprobs=[float(pick(-0.5, 0.0, 3.0, math.nan, -math.inf)) for _ in range(int(pick(n, n, n + 1, 0)))],
        reward=float(pick(1.0, math.nan, math.inf, -1e300)),
        reward_team=0.0,
        reward_local=float(pick(0.0, math.nan)),
        branch=int(pick(0, 1, K, -1, 99)),
    )


def hostile(rng: np.random.Generator, leased: list[WorkUnit], honest: WorkUnit | None) -> list[bytes]:
    """One hostile message; `None` stands for a `WorkRequest` (sent on the leasing connection)."""
    kind = int(rng.integers(9))
    if kind == 0:
        return [rng.bytes(int(rng.integers(0, 300)))]
    if kind == 1:
        data = encode(SampleBatch("h", int(rng.integers(100)), [fuzzed_sample(rng, None)], last=bool(rng.integers(2))))
        return [data[: int(rng.integers(0, len(data)))]]
    if kind == 2:
        fields = {
            "type": str(rng.choice(["samples", "work_request", "hello", "weights_request", "nuke"])),
            "actor_id": [1, 2],
            "unit_id": "x",
            "samples": {"a": 1},
            "last": None,
        }
        return [msgspec.msgpack.encode(fields)]
    if kind == 3:
        return [encode(WorkRequest(f"h{int(rng.integers(5))}")), rng.bytes(8)]
    if kind == 4 and leased:
        unit = leased[int(rng.integers(len(leased)))]
        samples = [fuzzed_sample(rng, unit) for _ in range(int(rng.integers(0, 2 * K + 1)))]
        return [
            encode(
                SampleBatch(
                    f"h{int(rng.integers(5))}",
                    unit.unit_id,
                    samples,
                    last=bool(rng.integers(2)),
                    env_results=env_results(unit),
                )
            )
        ]
    if kind == 5 and honest is not None:
        # Claims the honest actor's id for its unit, with well-formed samples of the wrong content.
        return [
            encode(
                SampleBatch(
                    "good",
                    honest.unit_id,
                    unit_samples(honest, tag=6),
                    last=bool(rng.integers(2)),
                    env_results=env_results(honest),
                )
            )
        ]
    if kind == 6:
        return [encode(WeightsRequest("h", str(rng.choice(["shared", "x", ""])), int(rng.integers(-3, 3))))]
    if kind == 7:
        return [
            encode(Hello(int(rng.choice([PROTOCOL_VERSION, 0, 99])), "h", str(rng.choice([RUN, "other"])), ["shared"]))
        ]
    return []


def test_ten_thousand_hostile_messages_change_nothing(make_hub, connect) -> None:  # noqa: F811 (fixtures)
    hub = make_hub(unit_timeout_s=1.0)
    good = connect(hub, "good")
    hello(good)
    hub.publish("shared", 0, {"w": __import__("torch").zeros(4)})
    seeds = list(range(40, 60))
    round_id = hub.open_round(0, seeds, 2, split="train", greedy=False)
    rng = np.random.default_rng(0)
    ctx = zmq.Context.instance()
    sock, leased, honest = None, [], None
    # Leases go to one hostile connection, which may hold one unit at a time and never finishes it.
    # (Without CURVE keys, many connections could each hold one until it times out: only keys stop that.)
    leaser = ctx.socket(zmq.DEALER)
    leaser.setsockopt(zmq.LINGER, 0)
    leaser.connect(hub.endpoint.address)
    answered = silent = 0
    started = time.monotonic()
    for i in range(MESSAGES):
        if i % PER_CONNECTION == 0:
            if sock is not None:
                sock.close(linger=0)
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(hub.endpoint.address)
        if i % HONEST_EVERY == 0 and not hub._rounds[round_id].complete:
            if honest is not None:
                finish(good, honest, tag=2)
            honest = take_unit(good, timeout_s=10.0)
        frames_out = hostile(rng, leased, honest)
        via = sock if frames_out else leaser
        via.send_multipart(frames_out or [encode(WorkRequest(f"h{int(rng.integers(5))}"))])
        if not via.poll(5_000, zmq.POLLIN):
            silent += 1
            continue
        frames = via.recv_multipart()
        answered += 1
        if len(frames) == 1:
            reply = decode(frames[0], max_bytes=1 << 20)
            if isinstance(reply, WorkUnit):
                leased.append(reply)
    sock.close(linger=0)
    leaser.close(linger=0)
    assert silent == 0 and answered == MESSAGES  # every message got an answer, nothing hung
    assert hub._thread.is_alive() and hub._error is None

    # The honest actor finishes its unit and every unit the hostile peers leased and dropped.
    if honest is not None:
        finish(good, honest, tag=2)
    while not hub._rounds[round_id].complete:
        unit = take_unit(good, timeout_s=10.0)
        finish(good, unit, tag=2)
    data = hub.wait_round(stall_timeout_s=10.0)
    assert sorted(e.env for e in data.envs) == list(range(len(seeds)))
    assert len(data.samples) == len(seeds) * K and all(s.response_ids == [2, 2] for s in data.samples)
    m = hub.metrics()
    assert m.get("hub/handler_errors", 0.0) == 0.0
    assert m["hub/foreign_batches"] > 0  # the forged batches for the honest actor's units were refused
    assert len(leased) > 1 and m["hub/units_reassigned"] >= 1  # the leaser held units, one at a time
    assert time.monotonic() - started < 120
